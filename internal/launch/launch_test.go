package launch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// fakes of the launch's four seams: unit tests of the mechanism's bookkeeping; the integration
// tests of provision and warmpool run it against the local stack's EC2 server and DynamoDB Local.
type world struct {
	mu         sync.Mutex
	fleetErr   error
	launched   []fleet.Launched
	asked      []int
	badRecord  map[string]bool
	records    []string
	terminated []string
	room       int // instances the cap has room for; -1: no cap
	settled    map[string][]string
	released   []string
}

func (w *world) Create(_ context.Context, req fleet.Request) ([]fleet.Launched, error) {
	w.asked = append(w.asked, req.Count)
	if w.fleetErr != nil {
		return nil, w.fleetErr
	}
	var out []fleet.Launched
	for i := range req.Count {
		out = append(out, fleet.Launched{ID: fmt.Sprintf("i-%d", i), UsageClass: req.UsageClass})
	}
	return out, nil
}

type recordStore struct{ w *world }

func (s recordStore) Create(_ context.Context, in store.Instance) (store.Instance, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.badRecord[in.ID] {
		return store.Instance{}, errors.New("throttled")
	}
	s.w.records = append(s.w.records, in.ID)
	return in, nil
}

func (w *world) TerminateInstances(_ context.Context, in *ec2.TerminateInstancesInput, _ ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.terminated = append(w.terminated, in.InstanceIds...)
	return &ec2.TerminateInstancesOutput{}, nil
}

type caps struct{ w *world }

func (c caps) Reserve(_ context.Context, _, _ string, n int) error {
	if n > c.w.room {
		return &quota.RefusedError{Kind: quota.LimitDeployment, Max: c.w.room, Current: 0, Asked: n}
	}
	return nil
}

func (c caps) Settle(_ context.Context, id, _ string, instances []string) error {
	c.w.settled[id] = instances
	return nil
}

func (c caps) Release(_ context.Context, id, _ string) error {
	c.w.released = append(c.w.released, id)
	return nil
}

func TestLaunch(t *testing.T) {
	t.Parallel()
	ice := &fleet.InsufficientCapacityError{UsageClass: fleet.Spot, Requested: 3, Launched: 2,
		Terminated: []string{"i-t"}, Unterminated: []fleet.Launched{{ID: "i-u"}}}
	tests := []struct {
		name         string
		count        int
		fewer        bool
		room         int
		fleetErr     error
		badRecord    string
		wantAsked    []int
		wantRecorded []string
		wantEnded    []string
		wantSettled  []string
		wantReleased bool
		wantErr      error
	}{
		{name: "all recorded and settled", count: 3, room: 10, wantAsked: []int{3},
			wantRecorded: []string{"i-0", "i-1", "i-2"}, wantSettled: []string{"i-0", "i-1", "i-2"}},
		{name: "a record not written: that instance terminated", count: 2, room: 10, badRecord: "i-1", wantAsked: []int{2},
			wantRecorded: []string{"i-0"}, wantEnded: []string{"i-1"}, wantSettled: []string{"i-0"}, wantErr: launch.ErrNotRecorded},
		{name: "refused by a cap: nothing launched", count: 3, room: 1, wantErr: quota.ErrRefused},
		{name: "fewer: what the cap has room for", count: 3, room: 2, fewer: true, wantAsked: []int{2},
			wantRecorded: []string{"i-0", "i-1"}, wantSettled: []string{"i-0", "i-1"}},
		{name: "no capacity: reservation given back", count: 2, room: 10, fleetErr: errors.New("refused"), wantAsked: []int{2},
			wantReleased: true, wantErr: errors.New("refused")},
		{name: "partial fleet: the unterminated recorded for the caller to end", count: 3, room: 10, fleetErr: ice, wantAsked: []int{3},
			wantRecorded: []string{"i-u"}, wantEnded: []string{"i-t"}, wantSettled: []string{"i-u"}, wantErr: ice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &world{room: tc.room, fleetErr: tc.fleetErr, badRecord: map[string]bool{tc.badRecord: true}, settled: map[string][]string{}}
			l := launch.New(launch.Config{Fleet: w, Store: recordStore{w}, EC2: w, Capacity: caps{w}})
			out, err := l.Launch(t.Context(), launch.Order{
				Count: tc.count, Fewer: tc.fewer, RunnerClass: "c", Reservation: "r",
				Shape: launch.Shape{UsageClass: fleet.OnDemand},
				Record: func(_ int, l fleet.Launched) store.Instance {
					return store.Instance{ID: l.ID, State: store.StateCreated}
				},
			})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Launch: %v", err)
			case tc.wantErr != nil && (err == nil || !errors.Is(err, tc.wantErr) && err.Error() != tc.wantErr.Error()):
				t.Fatalf("Launch error = %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(w.asked, tc.wantAsked) {
				t.Errorf("fleet asked for %v, want %v", w.asked, tc.wantAsked)
			}
			var recorded, ended []string
			for _, r := range out.Recorded {
				recorded = append(recorded, r.ID)
			}
			for _, e := range out.Ended {
				ended = append(ended, e.InstanceID)
			}
			slices.Sort(recorded)
			if !slices.Equal(recorded, tc.wantRecorded) || !slices.Equal(ended, tc.wantEnded) {
				t.Errorf("recorded %v ended %v, want %v and %v", recorded, ended, tc.wantRecorded, tc.wantEnded)
			}
			if tc.badRecord != "" && !slices.Equal(w.terminated, []string{tc.badRecord}) {
				t.Errorf("terminated %v, want the unrecorded %s", w.terminated, tc.badRecord)
			}
			settled := slices.Sorted(slices.Values(w.settled["r"]))
			if !slices.Equal(settled, tc.wantSettled) || (len(w.released) > 0) != tc.wantReleased {
				t.Errorf("settled %v released %v, want %v and %v", settled, w.released, tc.wantSettled, tc.wantReleased)
			}
		})
	}
}
