package store

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestCanTransition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to State
		want     bool
	}{
		{StateCreated, StateRunning, true},
		{StateIdle, StateClaimed, true},
		{StateReady, StateClaimed, true},
		{StateStopped, StateClaimed, true},
		{StateClaimed, StateRunning, true},
		{StateClaimed, StateIdle, true},
		{StateRunning, StateIdle, true},
		{StateWarming, StateReady, true},
		{StateWarming, StateStopped, true},
		{StateRunning, StateTerminating, true},
		{StateTerminating, StateTerminated, true},
		{StateIdle, StateTerminated, true},
		{StateIdle, StateRunning, false},
		{StateCreated, StateClaimed, false},
		{StateRunning, StateClaimed, false},
		{StateTerminating, StateTerminating, false},
		{StateTerminating, StateIdle, false},
		{StateTerminated, StateTerminated, false},
		{StateTerminated, StateIdle, false},
		{StateIdle, StateCreated, false},
		{"", StateRunning, false},
	}
	for _, tt := range tests {
		if got := CanTransition(tt.from, tt.to); got != tt.want {
			t.Errorf("CanTransition(%q, %q) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, st := range States {
		if got, err := ParseState(string(st)); err != nil || got != st {
			t.Errorf("ParseState(%q) = %q, %v", st, got, err)
		}
	}
	for _, bad := range []string{"", "IDLE", "zombie", "idle "} {
		if _, err := ParseState(bad); err == nil {
			t.Errorf("ParseState(%q) succeeded, want error", bad)
		}
	}
}

func TestDecodeInstanceRejectsBadItems(t *testing.T) {
	t.Parallel()
	good := func() map[string]types.AttributeValue {
		return (&Store{}).encodeInstance(Instance{ID: "i-1", State: StateIdle, Version: 1})
	}
	tests := []struct {
		name   string
		mutate func(map[string]types.AttributeValue)
	}{
		{"unknown state", func(m map[string]types.AttributeValue) { m["state"] = sv("zombie") }},
		{"missing state", func(m map[string]types.AttributeValue) { delete(m, "state") }},
		{"state not a string", func(m map[string]types.AttributeValue) { m["state"] = n(3) }},
		{"threshold not a number", func(m map[string]types.AttributeValue) { m[attrThreshold] = sv("soon") }},
		{"bad number", func(m map[string]types.AttributeValue) {
			m["cpu"] = &types.AttributeValueMemberN{Value: "two"}
		}},
		{"id does not match key", func(m map[string]types.AttributeValue) { m[attrID] = sv("i-2") }},
	}
	if _, err := decodeInstance(good()); err != nil {
		t.Fatalf("decoding a good item: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			item := good()
			tt.mutate(item)
			_, err := decodeInstance(item)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decodeInstance = %v, want ErrInvalid", err)
			}
		})
	}
}
