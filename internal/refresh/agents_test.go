package refresh_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// The agent partitions' sweep deletes the items no live instance owns and those carrying an index
// key, keeps a live instance's own reports, and runs at its own pace.
func TestRefreshSweepsAgentItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	future := e.clock.Now().Add(3 * time.Hour)
	const live, gone, never = "i-0000000000000live", "i-0000000000000gone", "i-000000000000never"
	e.record(t, live, store.StateIdle, future)
	e.record(t, gone, store.StateTerminated, future)
	for _, id := range []string{live, gone} {
		if err := e.st.PutHeartbeat(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.PutSignal(ctx, never, store.SignalRecord{Signal: store.SignalRegistered, RunID: "1"}); err != nil {
		t.Fatal(err)
	}
	// What a job holding the live instance's role could write without the attribute condition.
	table := e.st.Table()
	_, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: store.AgentPK(live)}, "sk": &types.AttributeValueMemberS{Value: "POISON"},
		"idx_state": &types.AttributeValueMemberS{Value: "idle"}, "threshold": &types.AttributeValueMemberN{Value: "1"},
	}})
	if err != nil {
		t.Fatal(err)
	}

	e.opts.AgentSweepInterval = time.Hour
	r := e.refresher()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	want := refresh.AgentReport{Swept: true, Checked: 4, Unowned: 2, Foreign: []string{store.AgentPK(live) + " POISON"}}
	if diff := cmp.Diff(want, rep.Agents); diff != "" {
		t.Errorf("agent sweep (-want +got):\n%s", diff)
	}
	if _, err := e.st.Heartbeat(ctx, live); err != nil {
		t.Errorf("the live instance's heartbeat: %v, want kept", err)
	}
	for _, id := range []string{gone, never} {
		if _, err := e.st.Heartbeat(ctx, id); err == nil {
			t.Errorf("heartbeat of %s kept, want deleted", id)
		}
		if _, err := e.st.LastSignal(ctx, id); err == nil {
			t.Errorf("signal of %s kept, want deleted", id)
		}
	}

	// Not due again before the interval; due after it, with nothing left to delete.
	if again, err := r.Run(ctx); err != nil || again.Agents.Swept {
		t.Errorf("second pass: %v, swept %v; want not swept", err, again.Agents.Swept)
	}
	e.clock.Advance(time.Hour)
	if again, err := r.Run(ctx); err != nil || !again.Agents.Swept || again.Agents.Unowned+len(again.Agents.Foreign) != 0 {
		t.Errorf("pass after the interval: %v, %+v; want swept, nothing deleted", err, again.Agents)
	}
}
