//go:build faults

// The conditional writes a workflow does not make, for the lost-answer step: an instance's expiry
// and refresh's termination of it, the leader's lease, configuration, the quota ledger and its
// repair, the history's pool samples, and a pool job's lease renewal. Each is made through the lossy replica's own client, so its first attempt is
// applied and its answer lost, and each is judged by what the table holds afterwards.
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// otherWrites makes, on replica r, the conditional writes the lost-answer runs do not reach, and
// checks each did what it says.
// They work on items of their own, so they run at once.
func otherWrites(t *testing.T, e *env, r *replica) error {
	tag := fmt.Sprintf("faults-lost-%d", e.runSeq.Add(1))
	steps := []func(context.Context, *env, *replica, string) error{lostExpiry, lostLease, lostConfig, lostRenew, lostQuota, lostSample, lostAutoscale, lostRunnerRelease}
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() {
			began := time.Now()
			errs[i] = step(t.Context(), e, r, tag)
			t.Logf("other writes: %s in %s", runtime.FuncForPC(reflect.ValueOf(step).Pointer()).Name(), time.Since(began).Round(time.Millisecond))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lostExpiry: expire one idle instance (as a failed release does) and let refresh terminate it
// (its conditional mark of a record past its threshold). The record must end terminated.
func lostExpiry(ctx context.Context, e *env, r *replica, tag string) error {
	idle, err := e.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		return fmt.Errorf("listing idle records: %w", err)
	}
	i := slices.IndexFunc(idle, func(rec store.Instance) bool { return rec.RunID == "" && !rec.Expired(time.Now()) })
	if i < 0 {
		return errors.New("no idle instance to expire")
	}
	id, reason := idle[i].ID, "faults: "+tag+" expired"
	if _, err := r.st.Expire(ctx, id, "", reason); err != nil {
		return fmt.Errorf("instance expire: %w", err)
	}
	if _, err := r.ref.Run(ctx); err != nil {
		return fmt.Errorf("refresh of an expired instance: %w", err)
	}
	rec, err := e.sb.Store.Get(ctx, id)
	if err != nil || rec.State != store.StateTerminated {
		return fmt.Errorf("expired %s (%s) after refresh: %s (%s), %v; want terminated", id, reason, rec.State, rec.Reason, err)
	}
	return nil
}

// lostLease: acquire, renew and give up a leader lease.
func lostLease(ctx context.Context, e *env, r *replica, tag string) error {
	for i := range 2 {
		if _, err := r.st.AcquireLease(ctx, tag, "me", time.Minute); err != nil {
			return fmt.Errorf("lease acquire %d: %w", i+1, err)
		}
	}
	if l, err := e.sb.Store.CurrentLease(ctx, tag); err != nil || l.Holder != "me" {
		return fmt.Errorf("lease after its acquisition: %+v, %v; want held by me", l, err)
	}
	if err := r.st.ReleaseLease(ctx, tag, "me"); err != nil {
		return fmt.Errorf("lease release: %w", err)
	}
	if l, err := e.sb.Store.CurrentLease(ctx, tag); !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("lease after its release: %+v, %v; want none", l, err)
	}
	return nil
}

// lostConfig: create a configuration item, then update it.
func lostConfig(ctx context.Context, e *env, r *replica, tag string) error {
	it, err := r.st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigScaleSet, Name: tag, Spec: []byte(`{"v":1}`)}, 0)
	if err != nil {
		return fmt.Errorf("config create: %w", err)
	}
	if _, err := r.st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigScaleSet, Name: tag, Spec: []byte(`{"v":2}`)}, it.Version); err != nil {
		return fmt.Errorf("config update: %w", err)
	}
	got, err := e.sb.Store.GetConfig(ctx, store.ConfigScaleSet, tag)
	if err != nil || got.Version != 2 || string(got.Spec) != `{"v":2}` {
		return fmt.Errorf("config after create and update: v%d %s, %v; want v2 {\"v\":2}", got.Version, got.Spec, err)
	}
	return nil
}

// lostRenew: renew a served pool job's ledger lease (a run record), which leaves its version alone.
func lostRenew(ctx context.Context, e *env, r *replica, tag string) error {
	run, _, err := e.sb.Store.CreateRun(ctx, store.Run{Key: tag, RunID: tag, Attempt: 1, Status: "released"})
	if err != nil {
		return fmt.Errorf("run record to renew: %w", err)
	}
	if err := r.st.RenewRun(ctx, tag, run.Version); err != nil {
		return fmt.Errorf("run renew: %w", err)
	}
	got, err := e.sb.Store.GetRun(ctx, tag)
	if err != nil || got.Version != run.Version || got.UpdatedAt.Before(run.UpdatedAt) {
		return fmt.Errorf("run after its renewal: v%d updated %s, %v; want v%d, renewed", got.Version, got.UpdatedAt, err, run.Version)
	}
	return nil
}

// lostQuota: reserve, settle and release units on a counter of the step's own, then have Repair
// reset the counter after it drifted.
func lostQuota(ctx context.Context, e *env, r *replica, tag string) error {
	ledger := quota.New(r.db, e.sb.Table, quota.Options{})
	counter := "faults#" + tag
	held := func(want int, after string) error {
		n, err := quota.New(e.sb.Stack.DynamoDB(), e.sb.Table, quota.Options{}).Counter(ctx, counter)
		if err != nil || n != want {
			return fmt.Errorf("quota counter after %s: %d, %v; want %d", after, n, err, want)
		}
		return nil
	}
	lim := []quota.Limit{{Kind: quota.LimitDeployment, Counter: counter, Max: 10}}
	if err := ledger.Reserve(ctx, quota.Reservation{ID: tag, Amount: 3, Deadline: time.Now().Add(time.Hour)}, lim); err != nil {
		return fmt.Errorf("quota reserve: %w", err)
	}
	if err := held(3, "a reservation of 3"); err != nil {
		return err
	}
	if err := ledger.Settle(ctx, tag, []string{"i-faults-a"}); err != nil {
		return fmt.Errorf("quota settle: %w", err)
	}
	if err := held(1, "settling it for one instance"); err != nil {
		return err
	}
	if err := ledger.Release(ctx, tag); err != nil {
		return fmt.Errorf("quota release: %w", err)
	}
	if err := held(0, "its release"); err != nil {
		return err
	}
	// Drift: the counter says 5 while no reservation holds a unit of it.
	_, err := e.sb.Stack.DynamoDB().UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.sb.Table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "QUOTA#COUNTER"}, "sk": &types.AttributeValueMemberS{Value: counter},
		},
		UpdateExpression:          aws.String("SET held = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "5"}},
	})
	if err != nil {
		return fmt.Errorf("making the counter drift: %w", err)
	}
	if _, err := ledger.Repair(ctx, r.st, quota.RepairOptions{}); err != nil {
		return fmt.Errorf("quota repair: %w", err)
	}
	return held(0, "a repair of its drift")
}

// lostSample: record a pool sample of an interval of the step's own.
func lostSample(ctx context.Context, e *env, r *replica, _ string) error {
	at := time.Now().Add(-time.Duration(e.runSeq.Add(1)) * time.Hour) // an interval no sampler wrote
	if _, err := history.New(r.db, e.sb.Table, history.Options{}).RecordSample(ctx, at, []history.PoolCount{{RunnerClass: warmClass}}); err != nil {
		return fmt.Errorf("history sample: %w", err)
	}
	if ok, err := history.New(e.sb.Stack.DynamoDB(), e.sb.Table, history.Options{}).HasSample(ctx, at); err != nil || !ok {
		return fmt.Errorf("history sample after recording it: present %v, %v", ok, err)
	}
	return nil
}

// coverage compares the conditional writes whose answers were lost with every declared one
// (internal/condwrite): it returns how many were hit, the declared ones never hit, and the
// conditional requests that carried no name.
func coverage(hit map[string]int) (n int, missed, unnamed []string) {
	for _, w := range condwrite.All() {
		if hit[string(w)] > 0 {
			n++
		} else {
			missed = append(missed, string(w))
		}
	}
	for w := range hit {
		if strings.HasPrefix(w, "unnamed ") {
			unnamed = append(unnamed, w)
		}
	}
	slices.Sort(unnamed)
	return n, missed, unnamed
}
