// Package pool is the resource pool: one SQS queue per runner class, one message per idle instance
// that the agent confirmed clean and deregistered. Release puts messages; the pickup manager of a
// provision takes them, filters them in memory and hands matches to claim workers.
package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Message is the pool entry of one idle instance: everything selection needs without reading the
// table. The record in the table stays the source of truth: a message whose record is no longer
// idle is dropped, never claimed.
type Message struct {
	InstanceID    string    `json:"instanceId"`
	UsageClass    string    `json:"usageClass"` // "spot" or "on-demand"
	InstanceType  string    `json:"instanceType"`
	CPU           int       `json:"cpu"`       // vCPUs
	MemoryMiB     int       `json:"memoryMiB"` // MiB
	ResourceClass string    `json:"resourceClass,omitempty"`
	RunnerClass   string    `json:"runnerClass,omitempty"`
	Scope         string    `json:"scope,omitempty"` // repository or owner the instance may serve
	Zone          string    `json:"zone,omitempty"`
	Threshold     time.Time `json:"threshold"` // the idle deadline: past it the message is dead
	// PooledAt is the control plane's pool mark this message announces (store.Instance.PooledAt,
	// millisecond precision): every pooling of an instance writes a new mark, so a message left
	// from an earlier pooling (a claim through the second look cannot delete the message it did
	// not receive) is told from the current one, and a claim of it fails. Zero: a message of a
	// version before the mark was carried, which any pooling of its instance honours.
	PooledAt time.Time `json:"pooledAt,omitzero"`
}

// Announces reports whether the message may stand for the pooling marked at pooledAt: it carries
// that mark, or none (an older message, judged by the record alone).
func (m Message) Announces(pooledAt time.Time) bool {
	return m.PooledAt.IsZero() || m.PooledAt.UnixMilli() == pooledAt.UnixMilli()
}

// ErrBadMessage marks a queue message that cannot be decoded or fails validation. Such a message is
// deleted and logged, never retried forever and never claimed.
var ErrBadMessage = errors.New("bad pool message")

// UsageClasses are the valid usage classes.
var UsageClasses = []string{"spot", "on-demand"}

// Validate checks a message's fields.
func (m Message) Validate() error {
	var problems []string
	if !strings.HasPrefix(m.InstanceID, "i-") || len(m.InstanceID) > 32 {
		problems = append(problems, fmt.Sprintf("instanceId %q is not an EC2 instance id", m.InstanceID))
	}
	if m.UsageClass != "spot" && m.UsageClass != "on-demand" {
		problems = append(problems, fmt.Sprintf("usageClass %q is not spot or on-demand", m.UsageClass))
	}
	if m.InstanceType == "" {
		problems = append(problems, "instanceType is empty")
	}
	if m.CPU < 0 || m.MemoryMiB < 0 {
		problems = append(problems, "cpu and memoryMiB must not be negative")
	}
	if m.Threshold.IsZero() {
		problems = append(problems, "threshold is missing")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrBadMessage, strings.Join(problems, "; "))
	}
	return nil
}

// Encode renders a message body.
func (m Message) Encode() (string, error) {
	if err := m.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encoding pool message: %w", err)
	}
	return string(b), nil
}

// Decode parses and validates a message body. Unknown fields are rejected so a message written by a
// different product version is noticed, not half-read.
func Decode(body string) (Message, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if dec.More() {
		return Message{}, fmt.Errorf("%w: trailing data after the JSON object", ErrBadMessage)
	}
	return m, m.Validate()
}
