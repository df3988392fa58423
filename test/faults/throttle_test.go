//go:build faults

// The ec2-throttle and slow steps of the fault matrix: EC2 refuses every mutating call for a while,
// as it does when an account's mutating-action bucket is empty; AWS answers that hang.
package faults_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
)

// throttleWindow is EC2's 30 s of throttling, scaled as the sandbox scales time.
const throttleWindow = 3 * time.Second

// ec2Throttle: every mutating EC2 call (CreateFleet, CreateTags for claim notices,
// TerminateInstances, Start/Stop) is answered RequestLimitExceeded for throttleWindow, starting as a
// workflow begins on a pool holding idle instances (claims of pooled instances, a creation, a
// release). The SDK's back-off outlasts the window: every provision and release succeeds, no
// instance the run used is terminated (a failed claim notice hands its instance back to the pool,
// never to the terminator), and the whole deployment passes env.verify. A run sees two or three
// refusals (the back-off spaces the attempts): the step runs at least throttleRuns runs, and more
// (at most 4×) until EC2 refused 20 calls.
func ec2Throttle(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	defer e.sb.Stack.EC2.SetThrottleMutating(0)
	const throttleRuns, wantInjections = 4, 20
	runs, ok, healthyTerminated, stuck, injections := 0, 0, 0, 0, 0
	for i := 0; i < throttleRuns || (injections < wantInjections && i < 4*throttleRuns); i++ {
		runs++
		err := func() error {
			if err := e.stock(ctx, r, 1); err != nil {
				return err
			}
			before, refused := e.sb.Stack.EC2.Calls(), e.sb.Stack.EC2.Throttled()
			e.sb.Stack.EC2.SetThrottleMutating(throttleWindow)
			w, err := judgedWorkflow(ctx, e, r, i)
			e.sb.Stack.EC2.SetThrottleMutating(0)
			refused = e.sb.Stack.EC2.Throttled() - refused
			injections += refused
			t.Logf("run %d: %d calls refused; EC2 calls during the run %v (before %v)", i+1, refused, e.sb.Stack.EC2.Calls(), before)
			if err != nil {
				if errorsIsStuck(err) {
					stuck++
				}
				return err
			}
			n, err := e.judge(ctx, w)
			healthyTerminated += n
			return err
		}()
		if err != nil {
			t.Errorf("ec2-throttle run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	if injections < wantInjections {
		t.Errorf("only %d calls refused with RequestLimitExceeded in %d runs, want at least %d", injections, runs, wantInjections)
	}
	e.report("ec2-throttle", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d injections=%d window=%s", healthyTerminated, stuck, injections, throttleWindow))
}

// slowCallTimeout is the slow replica's deadline per AWS request: the service's 30 s
// aws-call-timeout, scaled as the sandbox scales time.
const slowCallTimeout = 3 * time.Second

// slowAnswers: 15 % of the replica's DynamoDB, SQS and EC2 requests are applied and their answer
// hangs past every deadline; each attempt's deadline (slowCallTimeout) fails it and the SDK
// retries. Every provision and release answers within a minute, with success, no instance the run
// used is terminated, and the deployment passes env.verify. The step prints the slowest workflow.
func slowAnswers(t *testing.T, e *env) {
	ctx := t.Context()
	slow := &faults.LostAnswer{Share: 0.15, Hang: time.Hour, Rand: rand.New(rand.NewPCG(e.rng.Uint64(), 2))}
	r := e.replica(replicaOptions{lost: slow, quickRetries: true, callTimeout: slowCallTimeout})
	const runs = 3
	ok, healthyTerminated, stuck := 0, 0, 0
	var slowest time.Duration
	for i := range runs {
		err := func() error {
			began := time.Now()
			w, err := judgedWorkflow(ctx, e, r, i)
			slowest = max(slowest, time.Since(began))
			if err != nil {
				if errorsIsStuck(err) {
					stuck++
				}
				return err
			}
			if _, err := r.ref.Run(ctx); err != nil {
				return fmt.Errorf("refresh: %w", err)
			}
			n, err := e.judge(ctx, w)
			healthyTerminated += n
			return err
		}()
		if err != nil {
			t.Errorf("slow run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	hung := 0
	for _, n := range slow.Lost() {
		hung += n
	}
	if hung < 20 {
		t.Errorf("only %d answers hung, want at least 20", hung)
	}
	t.Logf("slow: answers hung %v", slow.Lost())
	e.report("slow", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d hung=%d slowest_workflow=%s", healthyTerminated, stuck, hung, slowest.Round(100*time.Millisecond)))
}
