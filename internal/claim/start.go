// Starting stopped warm-pool instances: the branch of selection between the pool (idle and hot
// instances) and creation, shared by step-driven provisions and the webhook path's pool worker. A
// stopped instance is claimed for its run first (stopped -> claimed, a conditional write, so two
// replicas never take the same one), then started; StartInstances carries up to MaxStartBatch ids
// per call, so N stopped instances cost ceil(N/50) calls when EC2 accepts them.
package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// StartAPI is the part of the EC2 client starting stopped instances needs; *ec2.Client satisfies it.
type StartAPI interface {
	StartInstances(ctx context.Context, in *ec2.StartInstancesInput, opts ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error)
}

// MaxStartBatch is the number of instance ids one StartInstances call carries (DESIGN: EC2
// mutations in batches of 50).
const MaxStartBatch = 50

// Starter claims and starts stopped warm instances.
type Starter struct {
	st   Store
	api  StartAPI
	reg  *Registrar
	opts Options
	log  *slog.Logger
}

// NewStarter returns a Starter. reg discards instances whose start failed.
func NewStarter(st Store, api StartAPI, reg *Registrar, opts Options) *Starter {
	opts = opts.withDefaults()
	return &Starter{st: st, api: api, reg: reg, opts: opts, log: opts.Logger}
}

// StartResult is what ClaimAndStart did. It is complete even when ClaimAndStart returns an error.
type StartResult struct {
	// Started are the instances claimed for their run (record state claimed, RunID set) and
	// started: EC2 accepted the StartInstances call; they boot and their agent reads the record.
	Started []store.Instance
	// Unserved lists the runs (one entry per wanted instance) for which no candidate was left.
	Unserved []string
	// StartFailed lists the runs (one entry per wanted instance) whose claimed instance EC2 would
	// not start.
	StartFailed []string
	// Discarded are instances claimed for a run whose start failed: EC2 refused them, and the state
	// machine has no way from claimed back to stopped, so they are terminated (the pool's
	// convergence replaces them).
	Discarded []Discard
	// Lost counts candidates that were no longer stopped, expired, or taken by another claimer.
	Lost int
	// StartCalls counts StartInstances calls.
	StartCalls int
}

// ClaimAndStart gives each entry of runs (a run id; repeat it for several instances of one run)
// one of the stopped candidates, trying them in order (the caller sorts them by preference), with
// threshold as the claim deadline, then starts the claimed instances in batches of MaxStartBatch.
// A batch EC2 refuses is retried one instance at a time, so one bad instance (terminated behind
// the table's back, or out of capacity in its zone) does not sink the other 49; instances that
// still fail are discarded and their runs reported in StartFailed, for the caller to serve
// otherwise.
//
// The error reports store or EC2 failures other than lost races; every instance claimed is in the
// result either way.
func (s *Starter) ClaimAndStart(ctx context.Context, cands []store.Instance, runs []string, threshold time.Time) (StartResult, error) {
	var res StartResult
	if len(runs) == 0 {
		return res, nil
	}
	if threshold.IsZero() {
		return res, fmt.Errorf("claiming stopped instances: no claim threshold: %w", store.ErrInvalid)
	}
	taken, err := Take(ctx, s.st, cands, runs, threshold, store.StateStopped)
	res.Lost = taken.Lost
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	claimed := taken.Claimed

	var toStart []store.Instance
	for i, in := range claimed {
		if in.ID == "" {
			res.Unserved = append(res.Unserved, runs[i])
			continue
		}
		toStart = append(toStart, in)
	}
	slices.SortFunc(toStart, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })
	for batch := range slices.Chunk(toStart, MaxStartBatch) {
		started, failed, err := s.start(ctx, batch, &res)
		res.Started = append(res.Started, started...)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range failed {
			res.StartFailed = append(res.StartFailed, f.RunID)
		}
		s.discard(ctx, failed, &res)
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("claiming and starting stopped instances: %w", err)
	}
	return res, nil
}

type failedStart struct {
	ID, RunID, Reason string
}

// start starts one batch. A refused batch of several is retried instance by instance.
func (s *Starter) start(ctx context.Context, batch []store.Instance, res *StartResult) (started []store.Instance, failed []failedStart, _ error) {
	ids := make([]string, len(batch))
	for i, in := range batch {
		ids[i] = in.ID
	}
	// Once claimed, the instances must be started or discarded even if the caller gives up.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.StartWait+detachedTimeout)
	defer cancel()
	if len(batch) > 1 {
		res.StartCalls++
		_, err := s.api.StartInstances(dctx, &ec2.StartInstancesInput{InstanceIds: ids})
		if err == nil {
			return batch, nil, nil
		}
		s.log.Warn("StartInstances refused a batch; starting its instances one by one", "instances", len(batch), "err", err)
	}
	for _, in := range batch {
		if err := s.startOne(dctx, in.ID, res); err != nil {
			failed = append(failed, failedStart{ID: in.ID, RunID: in.RunID, Reason: "start failed: " + err.Error()})
			continue
		}
		started = append(started, in)
	}
	return started, failed, nil
}

// startOne starts one instance. An instance still stopping (EC2 answers IncorrectInstanceState
// until it is stopped; the pool marks an instance stopped when it asks EC2 to stop it) is tried
// again, with a growing pause, for up to StartWait.
func (s *Starter) startOne(ctx context.Context, id string, res *StartResult) error {
	deadline := time.Now().Add(s.opts.StartWait)
	pause := 250 * time.Millisecond
	for {
		res.StartCalls++
		_, err := s.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
		var ae smithy.APIError
		if err == nil || !errors.As(err, &ae) || ae.ErrorCode() != "IncorrectInstanceState" || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

func (s *Starter) discard(ctx context.Context, failed []failedStart, res *StartResult) {
	if len(failed) == 0 {
		return
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	for _, f := range failed {
		err := s.reg.Discard(dctx, f.ID, f.RunID, f.Reason)
		s.log.Warn("stopped instance not started: discarded", "instance", f.ID, "run", f.RunID, "reason", f.Reason, "discard_err", err)
		res.Discarded = append(res.Discarded, Discard{InstanceID: f.ID, Reason: f.Reason, Err: err})
	}
}
