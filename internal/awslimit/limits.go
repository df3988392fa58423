// Package awslimit keeps runnerpool's EC2 calls inside EC2's own API throttling, so a burst of
// provisions slows down on our side instead of spending the account's tokens and coming back as
// RequestLimitExceeded for every tool in the account.
//
// EC2 throttles each account per Region with token buckets
// (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html), of two kinds:
//
//   - request-rate buckets: "each API is evaluated individually": every request takes one token
//     from its own API's bucket, whose size and refill depend on the API's category (for example
//     non-mutating actions such as DescribeHosts: 100 tokens, refilled at 20 per second; mutating
//     actions: 200 tokens, refilled at 5 per second; the resource-intensive actions, of which
//     RunInstances is the one we call: 50 tokens, refilled at 5 per second). A burst of CreateTags
//     therefore does not wait for tokens that CreateFleet or TerminateInstances spent;
//   - resource-rate buckets: the actions that launch, start, stop or terminate instances also take
//     one token per instance (RunInstances: 1000 tokens, refilled at 2 per second, so 1000 instances
//     can be launched at once and then 2 per second; StartInstances 1000 / 2; StopInstances and
//     TerminateInstances 1000 / 20).
//
// Limits mirrors those buckets in process (golang.org/x/time/rate) and is installed on the EC2
// client as smithy middleware (WithEC2Limits), so every EC2 call of the product waits for its tokens
// without any call site knowing. The request-rate wait happens once per attempt (after the SDK's
// retry middleware: a retried call costs EC2 a token too); the resource-rate wait once per
// operation, from the typed input (how many instances it asks for). EC2's buckets are per account,
// ours per process: with several reconciler replicas each keeps to the limits on its own, and the
// retryer (Retryer) absorbs what the sum of replicas overshoots.
package awslimit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bucket is one token bucket: Burst tokens at most, refilled at RefillPerSecond.
type Bucket struct {
	Burst           int
	RefillPerSecond float64
}

// The request-rate families and resource-rate buckets of the default configuration.
const (
	FamilyNonMutating       = "non-mutating"       // Describe*, Get*, List*
	FamilyMutating          = "mutating"           // CreateFleet, Start/Stop/TerminateInstances, CreateTags, DeleteTags, ...
	FamilyResourceIntensive = "resource-intensive" // RunInstances

	ResourceLaunched   = "instances-launched"   // RunInstances and CreateFleet, per instance
	ResourceStarted    = "instances-started"    // StartInstances, per instance
	ResourceStopped    = "instances-stopped"    // StopInstances, per instance
	ResourceTerminated = "instances-terminated" // TerminateInstances, per instance
)

// Config says which bucket each EC2 operation draws from.
type Config struct {
	// Families are the request-rate bucket sizes by family (API category) name: every operation
	// of the family has a bucket of its own of that size.
	Families map[string]Bucket
	// Operations maps an operation name to its family. An operation not listed belongs to
	// FamilyNonMutating when its name starts with Describe, Get or List, else to FamilyMutating.
	Operations map[string]string
	// Resources are the resource-rate buckets by name; which operation draws how many tokens from
	// which bucket is fixed by the operation's semantics (see resourceCost).
	Resources map[string]Bucket
}

// DefaultConfig is EC2's documented default buckets for an account.
func DefaultConfig() Config {
	return Config{
		Families: map[string]Bucket{
			FamilyNonMutating:       {Burst: 100, RefillPerSecond: 20},
			FamilyMutating:          {Burst: 200, RefillPerSecond: 5},
			FamilyResourceIntensive: {Burst: 50, RefillPerSecond: 5},
		},
		Operations: map[string]string{
			"RunInstances": FamilyResourceIntensive,
		},
		Resources: map[string]Bucket{
			// CreateFleet is not listed for a resource bucket of its own; an instant fleet
			// launches instances like RunInstances does, so we charge it to the same bucket.
			ResourceLaunched:   {Burst: 1000, RefillPerSecond: 2},
			ResourceStarted:    {Burst: 1000, RefillPerSecond: 2},
			ResourceStopped:    {Burst: 1000, RefillPerSecond: 20},
			ResourceTerminated: {Burst: 1000, RefillPerSecond: 20},
		},
	}
}

// Stats counts what one bucket did.
type Stats struct {
	Requests int64         // waits asked for (calls, or attempts for request-rate buckets)
	Tokens   int64         // tokens taken
	Delayed  int64         // waits that had to sleep because the bucket was empty
	Waited   time.Duration // total time slept
}

// Limits holds the buckets of one EC2 client (or of several clients of one account and Region).
// It is safe for concurrent use.
type Limits struct {
	ops       map[string]string
	families  map[string]Bucket
	resources map[string]*limiter

	mu       sync.Mutex
	requests map[string]*limiter // per operation, made on first use from its family's Bucket
}

type limiter struct {
	lim *rate.Limiter
	mu  sync.Mutex
	st  Stats
}

// New returns Limits for cfg. A bucket with Burst < 1 or RefillPerSecond <= 0 is an error: it
// would block every call forever.
func New(cfg Config) (*Limits, error) {
	l := &Limits{ops: maps.Clone(cfg.Operations), families: map[string]Bucket{}, resources: map[string]*limiter{},
		requests: map[string]*limiter{}}
	if l.ops == nil {
		l.ops = map[string]string{}
	}
	for _, want := range []string{FamilyNonMutating, FamilyMutating} {
		if _, ok := cfg.Families[want]; !ok {
			return nil, fmt.Errorf("ec2 limits: family %q is required", want)
		}
	}
	check := func(kind string, in map[string]Bucket) error {
		for name, b := range in {
			if b.Burst < 1 || b.RefillPerSecond <= 0 {
				return fmt.Errorf("ec2 limits: %s bucket %q: burst must be at least 1 and refill above 0, got %d and %g",
					kind, name, b.Burst, b.RefillPerSecond)
			}
		}
		return nil
	}
	if err := check("request", cfg.Families); err != nil {
		return nil, err
	}
	if err := check("resource", cfg.Resources); err != nil {
		return nil, err
	}
	maps.Copy(l.families, cfg.Families)
	for name, b := range cfg.Resources {
		l.resources[name] = b.limiter()
	}
	for op, fam := range l.ops {
		if _, ok := l.families[fam]; !ok {
			return nil, fmt.Errorf("ec2 limits: operation %s names unknown family %q", op, fam)
		}
	}
	return l, nil
}

// Default returns Limits with DefaultConfig.
func Default() *Limits {
	l, err := New(DefaultConfig())
	if err != nil {
		panic(err) // DefaultConfig is valid by construction
	}
	return l
}

// Family returns the request-rate family of an operation.
func (l *Limits) Family(operation string) string {
	if f, ok := l.ops[operation]; ok {
		return f
	}
	for _, p := range []string{"Describe", "Get", "List"} {
		if strings.HasPrefix(operation, p) {
			return FamilyNonMutating
		}
	}
	return FamilyMutating
}

func (b Bucket) limiter() *limiter {
	return &limiter{lim: rate.NewLimiter(rate.Limit(b.RefillPerSecond), b.Burst)}
}

// request returns the operation's own request-rate bucket.
func (l *Limits) request(operation string) *limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.requests[operation]
	if !ok {
		b = l.families[l.Family(operation)].limiter()
		l.requests[operation] = b
	}
	return b
}

// WaitRequest takes one token from the operation's request-rate bucket, sleeping until one is
// available or ctx ends.
func (l *Limits) WaitRequest(ctx context.Context, operation string) error {
	if err := l.request(operation).wait(ctx, 1); err != nil {
		return fmt.Errorf("ec2 %s: waiting for a %s request token: %w", operation, l.Family(operation), err)
	}
	return nil
}

// WaitResource takes n tokens from the named resource-rate bucket. An unknown bucket or n <= 0
// takes nothing. A cost above the bucket's size takes the whole bucket (EC2 would refuse such a
// request for capacity reasons of its own; we only pace it).
func (l *Limits) WaitResource(ctx context.Context, bucket string, n int) error {
	lim, ok := l.resources[bucket]
	if !ok || n <= 0 {
		return nil
	}
	if err := lim.wait(ctx, n); err != nil {
		return fmt.Errorf("waiting for %d %s tokens: %w", n, bucket, err)
	}
	return nil
}

func (b *limiter) wait(ctx context.Context, n int) error {
	n = min(n, b.lim.Burst())
	now := time.Now()
	r := b.lim.ReserveN(now, n)
	if !r.OK() {
		return fmt.Errorf("cannot reserve %d tokens", n)
	}
	d := r.DelayFrom(now)
	b.mu.Lock()
	b.st.Requests++
	b.st.Tokens += int64(n)
	if d > 0 {
		b.st.Delayed++
		b.st.Waited += d
	}
	b.mu.Unlock()
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel() // give the tokens back for the calls still waiting
		return ctx.Err()
	}
}

// Stats returns the counters by name: each operation's request-rate bucket (by operation name),
// the request-rate families as the sum of their operations' buckets (by family name), and the
// resource buckets.
func (l *Limits) Stats() map[string]Stats {
	out := map[string]Stats{}
	l.mu.Lock()
	reqs := maps.Clone(l.requests)
	l.mu.Unlock()
	for op, b := range reqs {
		st := b.stats()
		out[op] = st
		fam := out[l.Family(op)]
		fam.Requests += st.Requests
		fam.Tokens += st.Tokens
		fam.Delayed += st.Delayed
		fam.Waited += st.Waited
		out[l.Family(op)] = fam
	}
	for name, b := range l.resources {
		out[name] = b.stats()
	}
	return out
}

func (b *limiter) stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// Names lists the bucket names, sorted: the families, the resource buckets and the operations
// that have made a request so far.
func (l *Limits) Names() []string {
	names := slices.Collect(maps.Keys(l.families))
	names = append(names, slices.Collect(maps.Keys(l.resources))...)
	l.mu.Lock()
	names = append(names, slices.Collect(maps.Keys(l.requests))...)
	l.mu.Unlock()
	slices.Sort(names)
	return names
}
