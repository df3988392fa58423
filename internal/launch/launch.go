// Package launch is the one way runnerpool creates instances: every path that needs new capacity
// (a workflow's provision, a pool job's cold start, a warm pool's convergence) hands an Order to
// Launcher.Launch, which reserves the instances against the instance caps, runs one CreateFleet
// that the caller's context cannot cut short, writes a record for each launched instance whatever
// happens to the caller, settles the reservation on what was recorded, and terminates at once
// whatever could not be recorded. So DESIGN.md's rule 2 (no instance is lost: a live record or
// terminated) and the caps' accounting hold the same way on every path, written once.
//
// Like Karpenter's pkg/controllers/nodeclaim/lifecycle/launch.go, the only caller of its cloud
// provider's Create: no other product package builds a fleet.Request or creates an instance record.
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ErrNotRecorded wraps the failure of a launched instance's record write: the instance was
// terminated (Outcome.Ended). Unlike a refusal or a fleet short of capacity, it is not a want of
// capacity but a fault of the table.
var ErrNotRecorded = errors.New("launched instance not recorded")

// Fleet launches instances; *fleet.Fleet satisfies it.
type Fleet interface {
	Create(ctx context.Context, req fleet.Request) ([]fleet.Launched, error)
}

// Store writes the record of a launched instance; *store.Store satisfies it.
type Store interface {
	Create(ctx context.Context, in store.Instance) (store.Instance, error)
}

// EC2API terminates an instance whose record could not be written; *ec2.Client satisfies it.
type EC2API interface {
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Capacity reserves instances against the instance caps; *quota.Caps satisfies it. id names one
// fleet's reservation: a retried reservation of the same id counts once.
type Capacity interface {
	Reserve(ctx context.Context, id, runnerClass string, n int) error
	Settle(ctx context.Context, id, runnerClass string, instances []string) error
	Release(ctx context.Context, id, runnerClass string) error
}

// Config wires a Launcher. Store, EC2 and Fleet are required; Capacity is optional (no caps).
type Config struct {
	Fleet    Fleet
	Store    Store
	EC2      EC2API
	Capacity Capacity
	// Timeout bounds the CreateFleet call and the record writes after it, which run detached from
	// the caller's context (default 2 min).
	Timeout time.Duration
	// Concurrency bounds parallel record writes (default 16).
	Concurrency int
	Logger      *slog.Logger
}

// Launcher launches and records instances. It is safe for concurrent use.
type Launcher struct{ cfg Config }

// New returns a Launcher.
func New(cfg Config) *Launcher {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Launcher{cfg: cfg}
}

// Shape is what the instances of an order must be: the fleet's request without its count.
type Shape struct {
	UsageClass           string // fleet.Spot or fleet.OnDemand
	InstanceTypes        []string
	MinCPU, MinMemoryMiB int
	AllowBurstable       bool
	FallbackToOnDemand   bool
	ClientToken          string // makes a retried CreateFleet return the first fleet (optional)
	Spec                 fleet.LaunchSpec
}

// Order is one fleet to launch.
type Order struct {
	Count int
	Shape Shape
	// RunnerClass and Reservation name the reservation against the caps (Reservation must be new
	// for every fleet, or the fleet's client token where a retry must count once).
	RunnerClass string
	Reservation string
	// Fewer: where the caps have room for fewer than Count, launch what fits (convergence);
	// otherwise a refusal launches nothing.
	Fewer bool
	// Record makes the record of the i-th launched instance. It runs straight after CreateFleet
	// returned, whatever happens to the caller's context.
	Record func(i int, l fleet.Launched) store.Instance
}

// Ended is an instance the launch terminated: one a partial fleet left (terminated by the fleet
// before any record), or one whose record could not be written. Err is set when the termination
// itself failed (the orphan sweep ends it).
type Ended struct {
	InstanceID string
	Reason     string
	Err        error
}

// Outcome is what a launch did. It is complete whatever Launch returns.
type Outcome struct {
	// Reserved is how many instances the order was allowed to launch (Count without caps).
	Reserved int
	// Refused is set when a cap held back some (Fewer) or all of the order.
	Refused *quota.RefusedError
	// Recorded are the launched instances with a record written, in launch order.
	Recorded []store.Instance
	// Ended are the instances terminated because no record of them was written.
	Ended []Ended
}

// Launch reserves, launches, records and settles one order. The error is a refusal of the caps
// (wrapping quota.ErrRefused, nothing launched; with Fewer only when there was no room at all),
// the fleet's (a *fleet.InsufficientCapacityError with nothing left running but what Recorded
// holds), or the record writes' (their instances are terminated, in Ended).
func (l *Launcher) Launch(ctx context.Context, o Order) (Outcome, error) {
	out := Outcome{Reserved: o.Count}
	if o.Count <= 0 {
		return out, nil
	}
	n, err := l.reserve(ctx, o, &out)
	if err != nil || n == 0 {
		return out, err
	}
	// The CreateFleet call is not cancelled with the caller: once EC2 may have launched instances,
	// their ids must be read and recorded. A call cut short would leave them to the orphan sweep.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	defer cancel()
	launched, ferr := l.cfg.Fleet.Create(dctx, o.request(n))
	var ice *fleet.InsufficientCapacityError
	if errors.As(ferr, &ice) {
		out.Ended = append(out.Ended, partial(ice)...)
		// The partial fleet could not be terminated: record those instances, so that the caller
		// ends them (and refresh, should that fail too).
		launched = ice.Unterminated
	} else if ferr != nil {
		launched = nil
	}
	recs, rerr := l.record(dctx, o, launched, &out)
	out.Recorded = recs
	l.settle(dctx, o, recs)
	return out, errors.Join(ferr, rerr)
}

func (o Order) request(n int) fleet.Request {
	s := o.Shape
	return fleet.Request{
		Count: n, UsageClass: s.UsageClass, InstanceTypes: s.InstanceTypes, MinCPU: s.MinCPU, MinMemoryMiB: s.MinMemoryMiB,
		AllowBurstable: s.AllowBurstable, FallbackToOnDemand: s.FallbackToOnDemand, ClientToken: s.ClientToken, Spec: s.Spec,
	}
}

// partial lists what a fleet short of capacity terminated itself, before any record was written.
func partial(ice *fleet.InsufficientCapacityError) []Ended {
	var out []Ended
	for e := ice; e != nil; e = e.Fallback {
		for _, id := range e.Terminated {
			out = append(out, Ended{InstanceID: id, Reason: "partial " + e.UsageClass + " fleet terminated before any record was written"})
		}
	}
	return out
}

// reserve reserves the order's instances; it returns how many may be launched.
func (l *Launcher) reserve(ctx context.Context, o Order, out *Outcome) (int, error) {
	if l.cfg.Capacity == nil {
		return o.Count, nil
	}
	err := l.cfg.Capacity.Reserve(ctx, o.Reservation, o.RunnerClass, o.Count)
	if err == nil {
		return o.Count, nil
	}
	out.Reserved = 0
	var refused *quota.RefusedError
	if !errors.As(err, &refused) {
		return 0, fmt.Errorf("reserving %d instances: %w", o.Count, err)
	}
	out.Refused = refused
	// A refusal writes nothing: what the cap has room for may be reserved under the same id.
	if room := refused.Max - refused.Current; o.Fewer && room > 0 && room < o.Count {
		if l.cfg.Capacity.Reserve(ctx, o.Reservation, o.RunnerClass, room) == nil {
			out.Reserved = room
			return room, nil
		}
	}
	if o.Fewer {
		return 0, nil
	}
	return 0, fmt.Errorf("reserving %d instances: %w", o.Count, err)
}

// record writes a record for each launched instance. An instance whose record cannot be written
// is terminated at once (nothing else would know of it but the orphan sweep).
func (l *Launcher) record(ctx context.Context, o Order, launched []fleet.Launched, out *Outcome) ([]store.Instance, error) {
	recs := make([]store.Instance, len(launched))
	ended := make([]*Ended, len(launched))
	errs := make([]error, len(launched))
	var g errgroup.Group
	g.SetLimit(l.cfg.Concurrency)
	for i, li := range launched {
		g.Go(func() error {
			rec, err := l.cfg.Store.Create(ctx, o.Record(i, li))
			if err == nil {
				recs[i] = rec
				return nil
			}
			// EC2 may answer NotFound for the instance it just launched (eventual consistency):
			// that is no termination, and the orphan sweep ends it once EC2 shows it.
			_, terr := l.cfg.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{li.ID}})
			done := "terminated"
			if terr != nil {
				done = "not terminated: the orphan sweep ends it"
				l.cfg.Logger.Error("instance without a record not terminated (the orphan sweep will)", "instance", li.ID, "err", terr)
			}
			ended[i] = &Ended{InstanceID: li.ID, Reason: "record not written: " + err.Error(), Err: terr}
			errs[i] = fmt.Errorf("%w: recording %s (%s): %w", ErrNotRecorded, li.ID, done, err)
			return nil
		})
	}
	_ = g.Wait()
	var kept []store.Instance
	for i, r := range recs {
		if ended[i] != nil {
			out.Ended = append(out.Ended, *ended[i])
			continue
		}
		kept = append(kept, r)
	}
	return kept, errors.Join(errs...)
}

// settle names the recorded instances of the reservation (none: the fleet launched nothing, and
// the reservation is given back). A failure is logged: refresh's quota repair settles the account.
func (l *Launcher) settle(ctx context.Context, o Order, recs []store.Instance) {
	if l.cfg.Capacity == nil {
		return
	}
	var err error
	if len(recs) == 0 {
		err = l.cfg.Capacity.Release(ctx, o.Reservation, o.RunnerClass)
	} else {
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
		}
		err = l.cfg.Capacity.Settle(ctx, o.Reservation, o.RunnerClass, ids)
	}
	if err != nil {
		l.cfg.Logger.Warn("instance reservation not settled; refresh repairs it", "reservation", o.Reservation, "err", err)
	}
}
