// Package invariant checks the rules of DESIGN.md against a deployment's real state: the state
// table, EC2 (only instances carrying the deployment's tag), the pool queues and the GitHub runners.
// The fault matrix runs it after every fault, the benchmark and the soak run at their end.
//
// The rules:
//
//   - double-claim: an instance is held by at most one run (the runs the caller knows hold
//     instances, Options.Held, never share one, and each held instance's record still names its
//     run); a registered runner carries the label of at most one run, and the label of the run its
//     record belongs to.
//   - state: a record's run id agrees with its state (idle, ready, stopped and warming records
//     belong to no run; created, claimed and running ones to one).
//   - orphan: every EC2 instance of the deployment that is not terminated has a live record
//     (instances launched less than OrphanGrace ago excepted, as refresh spares them).
//   - pool: every pool message that a claim could act on (its record is idle or ready, without a
//     run, and carries the control plane's pool mark, which claims require) stands for a clean
//     instance: its agent's last signal is the deregistration (UD_REMOVE_REG_REMOVE_RUN: no
//     registration since), or, for a ready one, the warm-up's UD_OK; and no runner is registered at
//     GitHub for it. Messages whose record is gone, moved on, or idle again without the pool mark (a
//     message of an earlier pooling) are stale: a claim re-checks the record and drops them,
//     refresh deletes them; they are reported (Report.Stale), not violations, as are duplicate
//     messages (the second claim loses).
//   - threshold: no live record is past its threshold plus a grace period (Options.Thresholds:
//     ask after a refresh pass, which enforces them).
//   - pooled: every poolable record (idle, or ready in a warm pool with a queue; not past its
//     threshold) that the control plane marked pooled (store.Instance.PooledAt, written once it
//     verified the hand-back or the warm-up) has exactly one live pool message, its announcement:
//     none hides it from every pickup, two make every walker's and pickup's work double
//     (Options.Pooled: ask after the refresh passes that follow a fault, which pool a lost one
//     again and drop duplicates; Report.AnnouncementsMissing and AnnouncementsDuplicate count
//     them). Before calling a message missing, the check reads the queues again with long polls,
//     which ask every SQS server.
//   - foreign: no item of an agent partition carries an index key (idx_state, idx_run, idx_pool).
//     The agent never writes one, and the instance role's attribute condition refuses it; such an
//     item is a job that reached the role in a deployment without the condition, or a bug.
//     Listings skip it and refresh deletes it, so it stops nothing, but it is reported.
//   - stuck-run: a run whose provision answered (Options.Answered) is never left provisioning: a
//     repeated request would wait on a provision that nobody runs. With Options.ProvisionDeadline,
//     no run the checker sees (held, or named by a live record) is provisioning longer
//     than that: nobody runs its provision any more.
//   - healthy-terminated: no instance the caller knows was healthy (Options.Healthy: the runs
//     that used it under a transient fault succeeded) is terminated, being terminated, past its
//     threshold, or gone.
//   - transient-termination: with Options.Terminations (under a transient fault), every
//     terminating record, and every terminated one the checker reads, has a recorded reason, and
//     no reason, nor that of a record expired for termination, is a transient fault of AWS or
//     GitHub (Transient: throttling, 5xx, a timeout, a refused connection): such a fault is waited
//     out, never paid for with an instance.
//   - deadline: every provision and release the caller made (Options.Answers) answered within its
//     documented deadline, with success or a clean error (not a deadline of its own that ran out).
//   - unpooled: with Options.IdlePooled (after the fault ended and a refresh pass ran), every idle
//     record without a run and within its threshold is in the pool again: marked pooled by the
//     control plane, with exactly one message (the pooled rule). An idle instance left out until
//     its threshold ends it is capacity the fault cost.
//   - unreadable: what the checker could not read is a violation as well as an error, never
//     silence: a caller that only looks at the report does not take an unread deployment for a
//     healthy one.
//   - idempotency: Unchanged compares two reports taken around a repeated release or refresh.
//   - credential-scope: no runner credential was minted for a scope other than its run's. Every
//     credential GitHub handed out (Options.Minted) names the repository of one of the deployment's
//     runs (Options.RunRepositories: the repositories the callers authenticated as), or its owner;
//     and a registered runner carrying a run's label sits in a scope that covers the repository of
//     that run's record (the control plane's own record of the run, never the instance's word).
//
// SQS cannot be read without taking messages: Check receives every visible message of each queue,
// holding them for a few seconds, and makes them visible again at once. Run it when nothing else
// is picking from the pool (the fault matrix and the benchmark check between operations).
package invariant

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
)

// Store is the part of *store.Store the checker reads.
type Store interface {
	Live(ctx context.Context) ([]store.Instance, error)
	Get(ctx context.Context, id string) (store.Instance, error)
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
	GetRun(ctx context.Context, key string) (store.Run, error)
	AgentItems(ctx context.Context) ([]store.AgentItem, error)
}

// EC2API lists the deployment's instances; *ec2.Client satisfies it.
type EC2API interface {
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
}

// SQSAPI reads the pool queues; *sqs.Client satisfies it.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// GitHub lists registered runners; *ghaccess.Client satisfies it.
type GitHub interface {
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
}

// The rules, as named in violations.
const (
	RuleDoubleClaim = "double-claim"
	RuleState       = "state"
	RuleOrphan      = "orphan"
	RulePool        = "pool"
	RuleThreshold   = "threshold"
	RulePooled      = "pooled"
	RuleIdempotency = "idempotency"
	RuleCredential  = "credential-scope"
	RuleForeign     = "foreign"
	// RuleUnreadable: part of the deployment could not be read, so the other rules could not be
	// judged there. A checker that cannot read reports it, never silence.
	RuleUnreadable = "unreadable"
	// RuleStuckRun: a run whose provision answered still has its record provisioning: a repeated
	// request would wait on a provision that nobody runs.
	RuleStuckRun = "stuck-run"
	// RuleHealthyTerminated: an instance known healthy was terminated or expired.
	RuleHealthyTerminated = "healthy-terminated"
	// RuleTransientTermination: a termination with no recorded reason, or for a transient fault.
	RuleTransientTermination = "transient-termination"
	// RuleDeadline: a provision or release answered past its deadline, or with its own deadline's
	// error.
	RuleDeadline = "deadline"
	// RuleUnpooled: an idle instance left out of the pool after the fault ended.
	RuleUnpooled = "unpooled"
)

// Answer is one provision or release the caller made, as it answered.
type Answer struct {
	Op       string // "provision" or "release"
	Run      string // run key
	Took     time.Duration
	Deadline time.Duration // the documented deadline of the call
	Err      error         // nil: success
}

// Mint is one runner credential GitHub handed out (the GitHub fake records them).
type Mint struct {
	Kind  string // registration, remove or jit
	Scope string // "owner/repo" or "owner"
}

// RunnerPrefix is the GitHub runner name of an instance, before its id.
const RunnerPrefix = "runnerpool-"

// Options say what to check.
type Options struct {
	// DeploymentID is the value of the deployment tag: only instances carrying it are checked.
	// Required.
	DeploymentID string
	// Queues are the pool queue URLs to read with SQS: each with its scope queues (pool/scope.go)
	// when SQS can list them (it implements pool.ListQueuesAPI).
	Queues []string
	SQS    SQSAPI
	// GitHub and Scopes, when set, add the runner checks.
	GitHub GitHub
	Scopes []string
	// Held maps the run keys the caller believes hold instances now (provisioned, not released)
	// to those instances.
	Held map[string][]string
	// Thresholds enables the threshold rule: a live record past its threshold by more than Grace
	// at Now is a violation. Ask after a refresh pass run at Now (or later).
	Thresholds bool
	Grace      time.Duration
	// Pooled enables the pooled rule: every idle record confirmed clean has exactly one live pool
	// message. Ask after a refresh pass, and give the time that pass started as RefreshedAt: an
	// agent that confirmed after it is pooled by the next pass, not judged by this check.
	Pooled      bool
	RefreshedAt time.Time
	// Now is the clock of the threshold rule (default time.Now).
	Now func() time.Time
	// OrphanGrace spares instances launched less than this before Now from the orphan rule, as
	// refresh's grace does (a provision writes its records just after its fleet call returns).
	OrphanGrace time.Duration
	// VisibilityTimeout is how long the check holds the messages it reads (default 5 s).
	VisibilityTimeout time.Duration
	// Minted and RunRepositories, when RunRepositories is set, add the credential-scope rule:
	// every minted credential names one of RunRepositories (or its owner).
	Minted          []Mint
	RunRepositories []string
	// Answered, when set, adds the stuck-run rule: the run keys whose provision answered (with
	// success or an error), none of which may still be provisioning.
	Answered []string
	// ProvisionDeadline, when set, extends stuck-run to every run of Held and the live
	// records: none may be provisioning for longer than this at Now.
	ProvisionDeadline time.Duration
	// Healthy, when set, adds the healthy-terminated rule for these instances.
	Healthy []string
	// Terminations adds the transient-termination rule (ask under a transient fault: a crash or an
	// instance's own failure are reasons to terminate, a throttled or failed call never is).
	Terminations bool
	// Answers, when set, adds the deadline rule.
	Answers []Answer
	// IdlePooled, with Pooled, adds the unpooled rule.
	IdlePooled bool
}

// Violation is one broken rule.
type Violation struct {
	Rule     string
	Instance string // empty when the violation is not about one instance
	Detail   string
}

func (v Violation) String() string {
	if v.Instance == "" {
		return v.Rule + ": " + v.Detail
	}
	return v.Rule + ": " + v.Instance + ": " + v.Detail
}

// Message is a pool message as read.
type Message struct {
	Queue      string
	InstanceID string // empty when the body is malformed
	// PooledAt is the pooling the message announces (pool.Message.PooledAt; zero: none named).
	PooledAt time.Time
	// Stale says why no claim can act on it (its record is gone or not poolable); empty when
	// one could.
	Stale string
}

// Report is what Check saw and what it found.
type Report struct {
	At time.Time
	// Instances are the deployment's EC2 instances that are not terminated, by id, with their
	// EC2 state.
	Instances map[string]string
	// Young are instances spared by OrphanGrace.
	Young []string
	// Records are the live records, by id.
	Records map[string]store.Instance
	// Messages are the pool messages read, in queue order.
	Messages []Message
	// Runners are the runnerpool runners registered at GitHub, by instance id.
	Runners map[string]ghaccess.Runner
	// Stale counts the stale pool messages, Duplicates the messages beyond the first of one
	// instance: garbage refresh deletes, not violations.
	Stale, Duplicates int
	// AnnouncementsMissing and AnnouncementsDuplicate count the poolable instances with no live
	// pool message and with more than one (the pooled rule, with Options.Pooled).
	AnnouncementsMissing, AnnouncementsDuplicate int
	Violations                                   []Violation
}

// OK reports whether no rule is broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Count is the number of violations of a rule.
func (r Report) Count(rule string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Rule == rule {
			n++
		}
	}
	return n
}

// Err is nil when no rule is broken, else an error listing the violations.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	lines := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		lines[i] = v.String()
	}
	return fmt.Errorf("%d invariant violations:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// Summary is one line: what was seen and how many violations of each rule.
func (r Report) Summary() string {
	counts := map[string]int{}
	for _, v := range r.Violations {
		counts[v.Rule]++
	}
	var parts []string
	for _, rule := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", rule, counts[rule]))
	}
	if len(parts) == 0 {
		parts = append(parts, "violations=0")
	}
	return fmt.Sprintf("instances=%d records=%d messages=%d stale=%d runners=%d announcements_missing=%d announcements_duplicate=%d %s",
		len(r.Instances), len(r.Records), len(r.Messages), r.Stale, len(r.Runners), r.AnnouncementsMissing, r.AnnouncementsDuplicate, strings.Join(parts, " "))
}

func (r *Report) add(rule, instance, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Rule: rule, Instance: instance, Detail: fmt.Sprintf(format, args...)})
}

// Check reads the deployment's state and checks every rule. The error is for what could not be
// read; the rules' verdicts are in the Report.
func Check(ctx context.Context, st Store, ec2c EC2API, o Options) (Report, error) {
	rep, err := check(ctx, st, ec2c, o)
	if err != nil {
		// The error is for the caller; the violation keeps a caller that only looks at the report
		// (rep.Err, rep.OK) from taking an unread deployment for a healthy one.
		rep.add(RuleUnreadable, "", "%v", err)
	}
	return rep, err
}

func check(ctx context.Context, st Store, ec2c EC2API, o Options) (Report, error) {
	if o.DeploymentID == "" {
		return Report{}, errors.New("invariant: a deployment id is required")
	}
	if len(o.Queues) > 0 && o.SQS == nil {
		return Report{}, errors.New("invariant: pool queues given without an SQS client")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = 5 * time.Second
	}
	rep := Report{At: o.Now(), Instances: map[string]string{}, Records: map[string]store.Instance{}, Runners: map[string]ghaccess.Runner{}}

	// EC2 first, then the table: a record written between the two reads is seen.
	launched := map[string]time.Time{}
	if err := describe(ctx, ec2c, o.DeploymentID, rep.Instances, launched); err != nil {
		return rep, fmt.Errorf("invariant: listing instances: %w", err)
	}
	for id, at := range launched {
		if o.OrphanGrace > 0 && (at.IsZero() || rep.At.Sub(at) < o.OrphanGrace) {
			rep.Young = append(rep.Young, id)
		}
	}
	slices.Sort(rep.Young)
	live, err := st.Live(ctx)
	if err != nil {
		return rep, fmt.Errorf("invariant: listing live records: %w", err)
	}
	for _, rec := range live {
		rep.Records[rec.ID] = rec
	}
	runnerScopes := map[string]string{}
	for _, scope := range o.Scopes {
		if o.GitHub == nil {
			break
		}
		runners, err := o.GitHub.ListRunners(ctx, scope)
		if err != nil {
			return rep, fmt.Errorf("invariant: listing runners of %s: %w", scope, err)
		}
		for _, r := range runners {
			if id, ok := strings.CutPrefix(r.Name, RunnerPrefix); ok {
				rep.Runners[id] = r
				runnerScopes[id] = scope
			}
		}
	}
	queues, err := withScopeQueues(ctx, o.SQS, o.Queues)
	if err != nil {
		return rep, fmt.Errorf("invariant: %w", err)
	}
	read := func(wait int32) error {
		rep.Messages = nil
		for _, q := range queues {
			msgs, err := readQueue(ctx, o.SQS, q, o.VisibilityTimeout, wait)
			if err != nil {
				return fmt.Errorf("invariant: reading pool %s: %w", q, err)
			}
			rep.Messages = append(rep.Messages, msgs...)
		}
		return nil
	}
	if err := read(0); err != nil {
		return rep, err
	}
	if o.Pooled && len(unpooledIdle(&rep)) > 0 {
		// Short polls sample a subset of SQS's servers: read again with long polls before calling
		// a message missing.
		if err := read(1); err != nil {
			return rep, err
		}
	}

	if err := checkForeign(ctx, st, &rep); err != nil {
		return rep, err
	}
	checkOrphans(ctx, st, &rep, o.OrphanGrace > 0)
	checkStates(&rep)
	checkClaims(ctx, st, &rep, o.Held)
	if err := checkPool(ctx, st, &rep); err != nil {
		return rep, err
	}
	if o.Thresholds {
		checkThresholds(&rep, rep.At, o.Grace)
	}
	checkCredentialScopes(ctx, st, &rep, o, runnerScopes)
	if o.Pooled {
		checkPooled(&rep, o.RefreshedAt, o.IdlePooled)
	}
	checkAnswered(ctx, st, &rep, o.Answered)
	checkProvisioning(ctx, st, &rep, o)
	checkTerminations(ctx, st, &rep, o.Healthy, o.Terminations)
	checkAnswers(&rep, o.Answers)
	slices.SortStableFunc(rep.Violations, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Rule, b.Rule), strings.Compare(a.Instance, b.Instance))
	})
	return rep, nil
}

// checkForeign reports the agent-partition items that carry an index key.
func checkForeign(ctx context.Context, st Store, rep *Report) error {
	items, err := st.AgentItems(ctx)
	if err != nil {
		return fmt.Errorf("invariant: listing agent items: %w", err)
	}
	for _, it := range items {
		if it.Indexed {
			rep.add(RuleForeign, it.ID, "agent item %s %s carries an index key", it.PK, it.SK)
		}
	}
	return nil
}

// describe lists the deployment's instances that are not (being) terminated.
func describe(ctx context.Context, api EC2API, deployment string, out map[string]string, launched map[string]time.Time) error {
	pg := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{
			{Name: aws.String("tag:" + tags.Deployment), Values: []string{deployment}},
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
		},
		MaxResults: aws.Int32(1000),
	})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, res := range page.Reservations {
			for _, in := range res.Instances {
				if tagValue(in.Tags, tags.Deployment) != deployment {
					continue // EC2 filter values are patterns; the tag must match exactly
				}
				state := ""
				if in.State != nil {
					state = string(in.State.Name)
				}
				out[aws.ToString(in.InstanceId)] = state
				launched[aws.ToString(in.InstanceId)] = aws.ToTime(in.LaunchTime)
			}
		}
	}
	return nil
}

func tagValue(ts []ec2types.Tag, key string) string {
	for _, t := range ts {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// withScopeQueues adds to each pool queue its scope queues, when api can list them.
func withScopeQueues(ctx context.Context, api SQSAPI, queues []string) ([]string, error) {
	lister, ok := api.(pool.ListQueuesAPI)
	if !ok {
		return queues, nil
	}
	out := slices.Clone(queues)
	for _, q := range queues {
		scoped, err := pool.ListScopeQueues(ctx, lister, q)
		if err != nil {
			return nil, err
		}
		out = append(out, scoped...)
	}
	return out, nil
}

// readQueue receives every visible message (holding them for vis) and makes them visible again.
// wait > 0 long-polls (every SQS server is asked), at the price of one wait at the end.
func readQueue(ctx context.Context, api SQSAPI, url string, vis time.Duration, wait int32) ([]Message, error) {
	seen := map[string]string{} // message id -> latest receipt handle
	var out []Message
	defer func() {
		// Put back what was held even if the check is cut short; they reappear anyway after vis.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var receipts []string
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			receipts = append(receipts, seen[id])
		}
		_ = pool.SetVisibilityBatch(rctx, api, url, receipts, 0)
	}()
	empty := 0
	for range 1000 {
		res, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: int32(max(vis.Seconds(), 1)),
			WaitTimeSeconds: wait,
		})
		if err != nil {
			return out, err
		}
		fresh := 0
		for _, m := range res.Messages {
			id := aws.ToString(m.MessageId)
			if _, ok := seen[id]; !ok {
				fresh++
				msg := Message{Queue: url}
				if pm, err := pool.Decode(aws.ToString(m.Body)); err == nil {
					msg.InstanceID, msg.PooledAt = pm.InstanceID, pm.PooledAt
				}
				out = append(out, msg)
			}
			seen[id] = aws.ToString(m.ReceiptHandle)
		}
		// A short poll samples a subset of the queue's servers: stop after two empty rounds (one
		// empty long poll is final).
		if fresh == 0 {
			if empty++; empty >= 2 || wait > 0 {
				break
			}
			continue
		}
		empty = 0
	}
	return out, nil
}

// checkOrphans: rule 2, every instance has a live record (the listing is confirmed by a
// consistent read, as refresh does).
func checkOrphans(ctx context.Context, st Store, rep *Report, grace bool) {
	for _, id := range slices.Sorted(maps.Keys(rep.Instances)) {
		if _, ok := rep.Records[id]; ok {
			continue
		}
		if _, young := slices.BinarySearch(rep.Young, id); young && grace {
			continue
		}
		rec, err := st.Get(ctx, id)
		switch {
		case err == nil && rec.State.Live():
			rep.Records[id] = rec
		case err == nil:
			rep.add(RuleOrphan, id, "%s in EC2, record %s", rep.Instances[id], rec.State)
		case errors.Is(err, store.ErrNotFound):
			rep.add(RuleOrphan, id, "%s in EC2 with no record", rep.Instances[id])
		default:
			rep.add(RuleOrphan, id, "%s in EC2, record unreadable: %v", rep.Instances[id], err)
		}
	}
}

// checkStates: a record's run id agrees with its state.
func checkStates(rep *Report) {
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		rec := rep.Records[id]
		switch rec.State {
		case store.StateIdle, store.StateReady, store.StateStopped, store.StateWarming:
			if rec.RunID != "" {
				rep.add(RuleState, id, "%s but belongs to run %s", rec.State, rec.RunID)
			}
		case store.StateCreated, store.StateClaimed, store.StateRunning:
			if rec.RunID == "" {
				rep.add(RuleState, id, "%s without a run", rec.State)
			}
		}
	}
}

// RunLabel is the GitHub label of a run key (store.RunKey: repository id, run id, attempt): the
// run attempt's, store.RunLabel.
func RunLabel(runKey string) string {
	parts := strings.Split(runKey, ":")
	if n, err := strconv.Atoi(parts[len(parts)-1]); len(parts) == 3 && err == nil {
		return store.RunLabel(parts[1], n)
	}
	return runKey
}

// runLabels are a runner's labels that name run attempts (store.RunLabel): GitHub run ids and
// attempts are decimal numbers.
func runLabels(labels []string) []string {
	var out []string
	for _, l := range labels {
		run, attempt, ok := strings.Cut(l, "-")
		if ok && run != "" && attempt != "" && strings.Trim(run+attempt, "0123456789") == "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkClaims: rule 1.
func checkClaims(ctx context.Context, st Store, rep *Report, held map[string][]string) {
	holders := map[string][]string{}
	for run, ids := range held {
		for _, id := range ids {
			holders[id] = append(holders[id], run)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(holders)) {
		runs := holders[id]
		slices.Sort(runs)
		if len(runs) > 1 {
			rep.add(RuleDoubleClaim, id, "held by %d runs at once: %s", len(runs), strings.Join(runs, ", "))
			continue
		}
		rec, ok := rep.Records[id]
		if !ok {
			r, err := st.Get(ctx, id)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				rep.add(RuleUnreadable, id, "record of an instance held by %s: %v", runs[0], err)
				continue
			}
			if err != nil || !r.State.Live() {
				continue // terminated (expired, discarded): the run lost it, nobody else has it
			}
			rec = r
		}
		switch {
		case rec.State == store.StateTerminating:
		case rec.RunID != runs[0]:
			rep.add(RuleDoubleClaim, id, "held by run %s, but the record is %s for run %q", runs[0], rec.State, rec.RunID)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rep.Runners)) {
		r := rep.Runners[id]
		labels := runLabels(r.Labels)
		if len(labels) > 1 {
			rep.add(RuleDoubleClaim, id, "runner %s carries the labels of %d runs: %s", r.Name, len(labels), strings.Join(labels, ", "))
			continue
		}
		rec, ok := rep.Records[id]
		if !ok || len(labels) == 0 || (rec.State != store.StateClaimed && rec.State != store.StateRunning) {
			continue
		}
		if want := RunLabel(rec.RunID); labels[0] != want {
			rep.add(RuleDoubleClaim, id, "record %s for run %s, but its runner is registered for run %s", rec.State, rec.RunID, labels[0])
		}
	}
}

// checkCredentialScopes: a credential is minted only for the scope of the control plane's own record
// of its run.
func checkCredentialScopes(ctx context.Context, st Store, rep *Report, o Options, runnerScopes map[string]string) {
	if len(o.RunRepositories) > 0 {
		bad := map[string]int{}
		for _, m := range o.Minted {
			if !slices.ContainsFunc(o.RunRepositories, func(repo string) bool { return pool.ScopeCovers(m.Scope, repo) }) {
				bad[m.Kind+" credential for "+m.Scope]++
			}
		}
		for _, k := range slices.Sorted(maps.Keys(bad)) {
			rep.add(RuleCredential, "", "%d× %s, which is no run's repository (runs: %s)", bad[k], k, strings.Join(o.RunRepositories, ", "))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rep.Runners)) {
		rec, ok := rep.Records[id]
		if !ok || rec.RunID == "" || runnerScopes[id] == "" {
			continue
		}
		labels := runLabels(rep.Runners[id].Labels)
		if len(labels) != 1 || labels[0] != RunLabel(rec.RunID) {
			continue // double-claim's business
		}
		run, err := st.GetRun(ctx, rec.RunID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			rep.add(RuleUnreadable, id, "run record %s: %v", rec.RunID, err)
			continue
		}
		if err != nil || run.Repository == "" {
			continue // not a step-driven run (a warm-pool job), or gone
		}
		if !pool.ScopeCovers(runnerScopes[id], run.Repository) {
			rep.add(RuleCredential, id, "runner %s of run %s is registered in %s, but the run is of %s", rep.Runners[id].Name, rec.RunID, runnerScopes[id], run.Repository)
		}
	}
}

// checkPool: rule 3. Every message is judged on its own: a message of an earlier pooling of an
// instance pooled again is stale, whichever of the two the queue returns first.
func checkPool(ctx context.Context, st Store, rep *Report) error {
	live := map[string]bool{} // instances with a live message seen
	judged := map[string]bool{}
	for i := range rep.Messages {
		m := &rep.Messages[i]
		if m.InstanceID == "" {
			m.Stale = "malformed"
			rep.Stale++
			continue
		}
		id := m.InstanceID
		rec, ok := rep.Records[id]
		if !ok {
			r, err := st.Get(ctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
				m.Stale, rep.Stale = "no record", rep.Stale+1
				continue
			case err != nil:
				return fmt.Errorf("invariant: reading the record of pooled %s: %w", id, err)
			}
			rec = r
		}
		if m.Stale = staleness(rec, m.PooledAt); m.Stale != "" {
			rep.Stale++
			continue
		}
		if live[id] {
			rep.Duplicates++
			continue
		}
		live[id] = true
		if !judged[id] {
			judged[id] = true
			if err := checkPooledClean(ctx, st, rep, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// staleness says why no claim can act on a message announcing the pooling at pooledAt of the
// instance whose record is rec ("" when one could).
func staleness(rec store.Instance, pooledAt time.Time) string {
	switch {
	case (rec.State != store.StateIdle && rec.State != store.StateReady) || rec.RunID != "":
		return fmt.Sprintf("record %s run %q", rec.State, rec.RunID)
	case rec.PooledAt.IsZero():
		// A message of an earlier pooling: claims require the control plane's pool mark
		// (store.ClaimPooled), so none can act on it.
		return fmt.Sprintf("record %s not marked pooled", rec.State)
	case !pooledAt.IsZero() && pooledAt.UnixMilli() != rec.PooledAt.UnixMilli():
		// Claims require the mark the message announces (store.ClaimPooledAt).
		return fmt.Sprintf("a message of the pooling at %s; the record was pooled again at %s",
			pooledAt.UTC().Format(time.RFC3339Nano), rec.PooledAt.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// checkPooledClean: a pooled instance a claim could take is clean: its agent confirmed the
// deregistration (or, hot, the warm-up) and GitHub lists no runner for it.
func checkPooledClean(ctx context.Context, st Store, rep *Report, rec store.Instance) error {
	id := rec.ID
	sig, err := st.LastSignal(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rep.add(RulePool, id, "pooled %s with no signal from its agent", rec.State)
		return nil
	case err != nil:
		return fmt.Errorf("invariant: reading the signal of pooled %s: %w", id, err)
	}
	clean := sig.Signal == store.SignalReleased || (rec.State == store.StateReady && sig.Signal == store.SignalPreRunnerOK)
	if !clean {
		rep.add(RulePool, id, "pooled %s, but the agent's last signal is %s (run %q): not confirmed clean", rec.State, sig.Signal, sig.RunID)
		return nil
	}
	if r, ok := rep.Runners[id]; ok {
		rep.add(RulePool, id, "pooled, but runner %s is still registered (labels %v)", r.Name, r.Labels)
	}
	return nil
}

// unpooledIdle lists the idle records, and the ready ones marked pooled (threshold ahead), with no
// message read.
func unpooledIdle(rep *Report) []string {
	have := map[string]bool{}
	for _, m := range rep.Messages {
		have[m.InstanceID] = true
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		rec := rep.Records[id]
		if (rec.State == store.StateIdle || poolableReady(rec)) && rec.RunID == "" && !rec.Expired(rep.At) && !have[id] {
			out = append(out, id)
		}
	}
	return out
}

// poolableReady reports whether rec is a hot warm-pool instance announced in a pool queue (its
// warm-up marked it pooled; a pool without a queue serves pool jobs only, and marks none).
func poolableReady(rec store.Instance) bool {
	return rec.State == store.StateReady && !rec.PooledAt.IsZero()
}

// checkPooled: after refresh, every idle record confirmed clean, and every ready one marked pooled,
// has exactly one live message; an idle one not confirmed clean has none (rule 3 keeps it out of
// the pool; its threshold ends it).
func checkPooled(rep *Report, refreshedAt time.Time, strict bool) {
	live := map[string]int{}
	for _, m := range rep.Messages {
		if m.InstanceID != "" && m.Stale == "" {
			live[m.InstanceID]++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		rec := rep.Records[id]
		if (rec.State != store.StateIdle && !poolableReady(rec)) || rec.RunID != "" || rec.Expired(rep.At) {
			continue
		}
		// Confirmed clean is the control plane's own mark, written once it verified the hand-back;
		// a message of a record not marked is stale (checkPool): no claim can take it.
		if strict && rec.PooledAt.IsZero() && (refreshedAt.IsZero() || rec.UpdatedAt.Before(refreshedAt)) {
			rep.add(RuleUnpooled, id, "idle since %s and never marked pooled (%s): out of the pool until its threshold", rec.UpdatedAt.Format(time.RFC3339), rec.Reason)
			continue
		}
		if rec.PooledAt.IsZero() || (!refreshedAt.IsZero() && rec.PooledAt.After(refreshedAt)) {
			continue // not in the pool, or marked after the refresh pass began: the next one pools it
		}
		// No message hides the instance from every pickup. A second live message is of the same
		// pooling (earlier poolings' are stale): every walk keeps the lowest message id and drops
		// the other, and refresh pools again only what two walks missed, so none is left after the
		// passes that follow a fault.
		switch n := live[id]; {
		case n == 0:
			rep.AnnouncementsMissing++
			rep.add(RulePooled, id, "%s and marked pooled at %s, with no live pool message (want exactly one)", rec.State, rec.PooledAt.UTC().Format(time.RFC3339Nano))
		case n > 1:
			rep.AnnouncementsDuplicate++
			rep.add(RulePooled, id, "%s and marked pooled at %s, with %d live pool messages (want exactly one)", rec.State, rec.PooledAt.UTC().Format(time.RFC3339Nano), n)
		}
	}
}

// checkAnswered: a run whose provision answered is never left provisioning.
func checkAnswered(ctx context.Context, st Store, rep *Report, answered []string) {
	for _, key := range answered {
		run, err := st.GetRun(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rep.add(RuleStuckRun, "", "run %s: its provision answered, and there is no run record", key)
		case err != nil:
			rep.add(RuleUnreadable, "", "run record %s: %v", key, err)
		case run.Status == statusProvisioning:
			rep.add(RuleStuckRun, "", "run %s: its provision answered, and its record is still %s since %s", key, run.Status, run.UpdatedAt.Format(time.RFC3339))
		}
	}
}

// statusProvisioning is provision.StatusProvisioning (the provision package is not imported here:
// the checker reads the table, it does not provision).
const statusProvisioning = "provisioning"

// checkThresholds: rule 4 (the control plane's half: refresh ran).
func checkThresholds(rep *Report, now time.Time, grace time.Duration) {
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		rec := rep.Records[id]
		if !rec.Threshold.IsZero() && now.Sub(rec.Threshold) > grace {
			rep.add(RuleThreshold, id, "%s %s past its threshold %s", rec.State, now.Sub(rec.Threshold).Round(time.Millisecond), rec.Threshold.Format(time.RFC3339))
		}
	}
}

// settling reports an EC2 state change that EC2 finishes by itself after an earlier call (a start,
// stop or terminate already under way): no action of the pass in between.
func settling(from, to string) bool {
	switch from {
	case "pending":
		return to == "running"
	case "stopping":
		return to == "stopped"
	case "shutting-down":
		return to == "terminated"
	}
	return false
}

// Unchanged checks idempotency: nothing changed between two reports taken around an operation
// that should have changed nothing (a repeated release, a second refresh pass): the same live
// records at the same versions, the same instances in the same EC2 states, the same pool messages.
func Unchanged(before, after Report) []Violation {
	var out []Violation
	add := func(id, format string, args ...any) {
		out = append(out, Violation{Rule: RuleIdempotency, Instance: id, Detail: fmt.Sprintf(format, args...)})
	}
	for _, id := range slices.Sorted(maps.Keys(before.Records)) {
		a := before.Records[id]
		b, ok := after.Records[id]
		switch {
		case !ok:
			add(id, "record %s v%d is no longer live", a.State, a.Version)
		case a.Version != b.Version:
			add(id, "record changed: %s v%d -> %s v%d (%s)", a.State, a.Version, b.State, b.Version, b.Reason)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(after.Records)) {
		if _, ok := before.Records[id]; !ok {
			add(id, "record appeared: %s", after.Records[id].State)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(before.Instances)) {
		if s, ok := after.Instances[id]; !ok || (s != before.Instances[id] && !settling(before.Instances[id], s)) {
			add(id, "instance went from %s to %q", before.Instances[id], s)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(after.Instances)) {
		if _, ok := before.Instances[id]; !ok {
			add(id, "instance appeared: %s", after.Instances[id])
		}
	}
	// Messages a claim could act on, one per instance: stale and duplicate ones come and go as
	// refresh and pickups see them.
	msgs := func(r Report) map[string]int {
		m := map[string]int{}
		for _, msg := range r.Messages {
			if msg.Stale == "" {
				m[msg.InstanceID] = 1
			}
		}
		return m
	}
	mb, ma := msgs(before), msgs(after)
	for _, id := range slices.Sorted(maps.Keys(mb)) {
		if ma[id] != mb[id] {
			add(id, "pool messages went from %d to %d", mb[id], ma[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ma)) {
		if _, ok := mb[id]; !ok {
			add(id, "pool messages went from 0 to %d", ma[id])
		}
	}
	return out
}

// checkProvisioning: no run the checker sees is provisioning past the provision's deadline.
func checkProvisioning(ctx context.Context, st Store, rep *Report, o Options) {
	if o.ProvisionDeadline <= 0 {
		return
	}
	// Answered runs are judged by checkAnswered already, more strictly.
	keys := map[string]bool{}
	for k := range o.Held {
		keys[k] = true
	}
	for _, rec := range rep.Records {
		if rec.RunID != "" {
			keys[rec.RunID] = true
		}
	}
	for _, k := range o.Answered {
		delete(keys, k)
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		run, err := st.GetRun(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Not a step-driven run (a pool job's instance), or gone.
		case err != nil:
			rep.add(RuleUnreadable, "", "run record %s: %v", key, err)
		case run.Status == statusProvisioning && rep.At.Sub(run.UpdatedAt) > o.ProvisionDeadline:
			rep.add(RuleStuckRun, "", "run %s: provisioning since %s, past its deadline of %s: nobody runs its provision%s", key, run.UpdatedAt.Format(time.RFC3339), o.ProvisionDeadline, namedBy(rep, key))
		}
	}
}

// namedBy lists the live records of run key, for a violation's detail: ", held by i-1 (created,
// threshold ..., reason ...)".
func namedBy(rep *Report, key string) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		if rec := rep.Records[id]; rec.RunID == key {
			parts = append(parts, fmt.Sprintf("%s (%s v%d, threshold %s, reason %q)", id, rec.State, rec.Version, rec.Threshold.Format(time.RFC3339), rec.Reason))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; its live records: " + strings.Join(parts, ", ")
}

// checkTerminations: the healthy instances are alive and within their thresholds; every
// termination the checker sees has a reason, and none is a transient fault.
func checkTerminations(ctx context.Context, st Store, rep *Report, healthy []string, reasons bool) {
	seen := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(rep.Records)) {
		rec := rep.Records[id]
		switch {
		case !reasons:
		case rec.State == store.StateTerminating:
			seen[id] = true
			checkReason(rep, rec)
		case rec.Expired(rep.At) && Transient(rec.Reason):
			// Expired (refresh terminates it next, and its mark replaces the reason): a
			// natural end has a reason of its own, or none; a transient fault is never one.
			rep.add(RuleTransientTermination, id, "%s expired for a transient fault: %s", rec.State, rec.Reason)
		}
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(healthy))) {
		rec, err := st.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rep.add(RuleHealthyTerminated, id, "healthy, and its record is gone")
			continue
		case err != nil:
			rep.add(RuleUnreadable, id, "record of a healthy instance: %v", err)
			continue
		}
		switch {
		case !rec.State.Live() || rec.State == store.StateTerminating:
			rep.add(RuleHealthyTerminated, id, "healthy, and %s (%s)", rec.State, rec.Reason)
		case rec.Expired(rep.At):
			rep.add(RuleHealthyTerminated, id, "healthy, and %s past its threshold (%s)", rec.State, rec.Reason)
		}
		if reasons && !rec.State.Live() && !seen[id] {
			checkReason(rep, rec)
		}
	}
}

func checkReason(rep *Report, rec store.Instance) {
	switch {
	case strings.TrimSpace(rec.Reason) == "":
		rep.add(RuleTransientTermination, rec.ID, "%s with no recorded reason", rec.State)
	case Transient(rec.Reason):
		rep.add(RuleTransientTermination, rec.ID, "%s for a transient fault: %s", rec.State, rec.Reason)
	}
}

// transientMarks are what AWS and GitHub say, and what a client says, when a call failed for a
// reason that passes by itself: throttling and rate limits, an internal error (5xx), a timeout, a
// refused or cut connection.
var transientMarks = []string{
	"requestlimitexceeded", "throttl", "toomanyrequests", "rate limit", "slowdown",
	"internalerror", "internalservererror", "internalfailure", "serviceunavailable", "service unavailable",
	"bad gateway", "gateway timeout", "status 500", "status 502", "status 503", "status 504",
	" 500 ", " 502 ", " 503 ", " 504 ", "context deadline exceeded", "timeout", "timed out",
	"connection refused", "connection reset", "broken pipe", "unexpected eof",
}

// Transient reports whether a recorded reason names a transient fault of AWS or GitHub.
func Transient(reason string) bool {
	r := " " + strings.ToLower(reason) + " "
	return slices.ContainsFunc(transientMarks, func(m string) bool { return strings.Contains(r, m) })
}

// checkAnswers: every provision and release answered within its deadline, cleanly.
func checkAnswers(rep *Report, answers []Answer) {
	for _, a := range answers {
		switch {
		case a.Deadline > 0 && a.Took > a.Deadline:
			rep.add(RuleDeadline, "", "%s of run %s answered after %s, past its deadline of %s (%v)", a.Op, a.Run, a.Took.Round(time.Millisecond), a.Deadline, a.Err)
		case errors.Is(a.Err, context.DeadlineExceeded) || errors.Is(a.Err, context.Canceled):
			rep.add(RuleDeadline, "", "%s of run %s ran out of its own deadline after %s: %v", a.Op, a.Run, a.Took.Round(time.Millisecond), a.Err)
		}
	}
}
