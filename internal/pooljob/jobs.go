// The job queue and the job ledger: the SQS queue that carries pool jobs (warmpool.Job) from the
// webhook and the scale sets' listeners to the pool workers, and the ledger that makes the whole
// path idempotent by job id.
//
// The ledger is one run record per job (store.CreateRun/GetRun/UpdateRun, key "pooljob:<job id>"):
// queued (accepted, a message is on its way) -> serving (a worker holds it, for at most a lease) ->
// served (an instance was claimed or launched for it and holds its runner registration) ->
// completed, or cancelled (its pool no longer exists) or abandoned (too old to serve). A second
// webhook delivery of a job the ledger already knows beyond queued enqueues nothing; a duplicate
// queue message of a job being or already served is dropped by the worker. Nothing is lost by a
// crash between two steps: the ledger is written before the message is sent, and a job whose
// ledger still says queued is sent again by the next delivery.
package pooljob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// Pool jobs: the workflow jobs routed to warm pools by the webhook, the SQS job queue that carries
// them to the pool workers, and the job ledger that makes the whole path idempotent by job id.
//
// The ledger is one run record per job (store.CreateRun/GetRun/UpdateRun, key "pooljob:<job id>"):
// queued (accepted, a message is on its way) -> serving (a worker holds it, for at most a lease) ->
// served (an instance was claimed or launched for it and holds its runner registration) ->
// completed, or cancelled (its pool no longer exists) or abandoned (too old to serve). A second
// webhook delivery of a job the ledger already knows beyond queued enqueues nothing; a duplicate
// queue message of a job being or already served is dropped by the worker. Nothing is lost by a
// crash between two steps: the ledger is written before the message is sent, and a job whose
// ledger still says queued is sent again by the next delivery.
// JobSQS is the part of the SQS client the job queue uses; *sqs.Client satisfies it.
type JobSQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// JobQueue is the pool job queue (standard or FIFO) with its ledger.
type JobQueue struct {
	api      JobSQS
	url      string
	st       warmpool.Store
	fifo     bool
	withdraw RunnerWithdrawer
}

// RunnerWithdrawer removes a scale set's just-in-time runner that never came up;
// *scalesets.Manager satisfies it.
type RunnerWithdrawer interface {
	RemoveRunner(ctx context.Context, scaleSetScope string, runnerID int64) error
}

// WithdrawRunners makes Requeue withdraw the runner of a scale set job whose instance failed and
// leave the job for the Actions service to offer again (see Requeue). Call it before the queue is
// used.
func (q *JobQueue) WithdrawRunners(w RunnerWithdrawer) { q.withdraw = w }

// NewJobQueue returns the job queue at url, with its ledger in st.
func NewJobQueue(api JobSQS, url string, st warmpool.Store) *JobQueue {
	return &JobQueue{api: api, url: url, st: ledgerStore{st}, fifo: strings.HasSuffix(url, ".fifo")}
}

// URL is the queue's URL.
func (q *JobQueue) URL() string { return q.url }

// Enqueue outcomes.
const (
	Enqueued  = "enqueued"
	Duplicate = "duplicate" // the ledger knows the job beyond queued: nothing sent
)

// Enqueue puts a job on the queue: durably once it returns nil. A queued job is recorded in the
// ledger first; a job the ledger already knows as being served (or done) is not sent again
// (Duplicate), one it knows as queued is sent again (the earlier send may have failed; a duplicate
// message is dropped by the worker). Completions are always sent: ending an instance is idempotent.
func (q *JobQueue) Enqueue(ctx context.Context, j warmpool.Job) (string, error) {
	body, err := warmpool.EncodeJob(j)
	if err != nil {
		return "", err
	}
	version := int64(0)
	if j.Action == warmpool.ActionQueued && !j.Rerun {
		r, created, err := q.st.CreateRun(ctx, store.Run{
			Key: j.LedgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
			RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: warmpool.JobQueued,
			Request: json.RawMessage(body), Workflow: j.Workflow, Event: j.Event, Ref: j.Ref, DefaultBranch: j.DefaultBranch,
		})
		if err != nil {
			return "", fmt.Errorf("recording pool job %d: %w", j.JobID, err)
		}
		if !created && r.Status != warmpool.JobQueued {
			return Duplicate, nil
		}
		version = r.Version
	}
	if err := q.send(ctx, j, body, version); err != nil {
		return "", err
	}
	return Enqueued, nil
}

func (q *JobQueue) send(ctx context.Context, j warmpool.Job, body string, version int64) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(body)}
	if q.fifo {
		// One group per job: no job waits behind another. Deduplication by job, action and ledger
		// version, so a re-queue is not taken for a duplicate of the first send.
		in.MessageGroupId = aws.String(fmt.Sprintf("job-%d", j.JobID))
		in.MessageDeduplicationId = aws.String(fmt.Sprintf("%s-%d-%d", j.Action, j.JobID, version))
	}
	if _, err := q.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sending pool job %d to %s: %w", j.JobID, q.url, err)
	}
	return nil
}

// Requeue puts a served job back on the queue because its instance failed (instanceID must be the
// one the ledger says served it, so a job already served again is left alone). It reports whether
// it did. A scale set job, when the queue withdraws runners (WithdrawRunners), is not sent again:
// its runner is withdrawn and the ledger left queued, and the Actions service offers the job
// again, as it does every job no runner of the set took in time.
func (q *JobQueue) Requeue(ctx context.Context, jobID, instanceID, reason string) (bool, error) {
	r, err := q.st.GetRun(ctx, "pooljob:"+jobID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var s warmpool.JobResult
	_ = json.Unmarshal(r.Result, &s)
	if r.Status != warmpool.JobServed || s.InstanceID != instanceID {
		return false, nil
	}
	j, err := warmpool.DecodeJob(string(r.Request))
	if err != nil {
		return false, fmt.Errorf("ledger of job %s: %w", jobID, err)
	}
	s.Reason = reason
	leftToGitHub := j.ScaleSetID != 0 && q.withdraw != nil
	if leftToGitHub {
		// A scale set job is the Actions service's to offer again (JobAvailable once no runner of
		// the set took it in time): withdraw the runner first, so a late instance cannot take the
		// job, then leave the ledger queued so the listener's next acquisition serves it.
		if s.RunnerID != 0 {
			if err := q.withdraw.RemoveRunner(ctx, j.ScaleSetScope, s.RunnerID); err != nil {
				return false, fmt.Errorf("withdrawing runner %d of job %s: %w", s.RunnerID, jobID, err)
			}
		}
		s.Reason = "runner withdrawn, left for the Actions service to offer again: " + reason
	}
	r.Status, r.Result = warmpool.JobQueued, mustJSON(s)
	r, err = q.st.UpdateRun(ctx, r, r.Version)
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err != nil || leftToGitHub {
		return err == nil, err
	}
	body, err := warmpool.EncodeJob(j)
	if err != nil {
		return false, err
	}
	// If this send fails the ledger says queued and the job waits for a redelivery of its webhook;
	// the error is reported and the next pass does not find the failed instance again.
	return true, q.send(ctx, j, body, r.Version)
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// message is one received job message.
type message struct {
	id, receipt string
	job         warmpool.Job
	err         error // undecodable: deleted
}

func (q *JobQueue) receive(ctx context.Context, maxN int, wait, visibility time.Duration) ([]message, error) {
	out, err := q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.url), MaxNumberOfMessages: int32(min(max(maxN, 1), 10)),
		WaitTimeSeconds: int32(min(max(wait.Seconds(), 0), 20)), VisibilityTimeout: int32(max(visibility.Seconds(), 1)),
	})
	if err != nil {
		return nil, fmt.Errorf("receiving pool jobs from %s: %w", q.url, err)
	}
	msgs := make([]message, len(out.Messages))
	for i, m := range out.Messages {
		msgs[i] = message{id: aws.ToString(m.MessageId), receipt: aws.ToString(m.ReceiptHandle)}
		msgs[i].job, msgs[i].err = warmpool.DecodeJob(aws.ToString(m.Body))
	}
	return msgs, nil
}

// deleteMessages deletes messages, 10 per call.
func (q *JobQueue) deleteMessages(ctx context.Context, msgs []message) error {
	if err := pool.DeleteBatch(ctx, q.api, q.url, receipts(msgs)).Err(); err != nil {
		return fmt.Errorf("deleting pool job messages: %w", err)
	}
	return nil
}

// retryLater makes messages visible again after delay (zero: at once).
func (q *JobQueue) retryLater(ctx context.Context, msgs []message, delay time.Duration) error {
	return q.setVisibility(ctx, msgs, delay, "re-queueing")
}

// extend keeps messages out of sight for d from now: the lease of jobs still being served.
func (q *JobQueue) extend(ctx context.Context, msgs []message, d time.Duration) error {
	return q.setVisibility(ctx, msgs, d, "extending the lease of")
}

// setVisibility changes the visibility timeout of messages; what says why, for errors. A message
// whose receipt handle expired (its visibility ran out and another receive took it) is reported
// among the failed entries.
func (q *JobQueue) setVisibility(ctx context.Context, msgs []message, d time.Duration, what string) error {
	if err := pool.SetVisibilityBatch(ctx, q.api, q.url, receipts(msgs), d).Err(); err != nil {
		return fmt.Errorf("%s pool job messages: %w", what, err)
	}
	return nil
}

func receipts(msgs []message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.receipt
	}
	return out
}

// ledger is the worker's side of the job ledger.
type ledger struct {
	st    warmpool.Store
	lease time.Duration
	now   func() time.Time
}

// Outcomes of ledger.begin.
const (
	beginServe    = iota // this worker serves the job now
	beginTakeover        // this worker serves the job now, after an attempt whose lease ran out
	beginBusy            // another worker holds it: leave the message
	beginDone            // served or ended already: drop the message
)

// begin takes the job for serving: queued -> serving (or a stale serving taken over).
func (l *ledger) begin(ctx context.Context, j warmpool.Job) (store.Run, int, error) {
	r, created, err := l.st.CreateRun(ctx, store.Run{
		Key: j.LedgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
		RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: warmpool.JobServing,
		Request: json.RawMessage(mustJSON(j)),
	})
	switch {
	case err != nil:
		return store.Run{}, 0, fmt.Errorf("ledger of job %d: %w", j.JobID, err)
	case created:
		return r, beginServe, nil
	}
	outcome := beginServe
	switch r.Status {
	case warmpool.JobQueued:
	case warmpool.JobServing:
		if l.now().Sub(r.UpdatedAt) < l.lease {
			return r, beginBusy, nil
		}
		outcome = beginTakeover
	default:
		return r, beginDone, nil
	}
	r.Status = warmpool.JobServing
	r, err = l.st.UpdateRun(ctx, r, r.Version)
	switch {
	case errors.Is(err, store.ErrConflict):
		return store.Run{}, beginBusy, nil
	case err != nil:
		return store.Run{}, 0, fmt.Errorf("ledger of job %d: %w", j.JobID, err)
	}
	return r, outcome, nil
}

// set moves a job this worker holds to status with result.
func (l *ledger) set(ctx context.Context, r store.Run, status string, res warmpool.JobResult) (store.Run, error) {
	r.Status, r.Result = status, mustJSON(res)
	out, err := l.st.UpdateRun(ctx, r, r.Version)
	if err != nil {
		return r, fmt.Errorf("ledger of %s to %s: %w", r.Key, status, err)
	}
	return out, nil
}

// end marks a job completed, whatever its status (creating the entry if the job was never seen).
func (l *ledger) end(ctx context.Context, j warmpool.Job) error {
	for range 3 {
		r, created, err := l.st.CreateRun(ctx, store.Run{
			Key: j.LedgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
			RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: warmpool.JobCompleted,
			Request: json.RawMessage(mustJSON(j)),
		})
		if err != nil || created || r.Status == warmpool.JobCompleted {
			return err
		}
		r.Status = warmpool.JobCompleted
		if _, err = l.st.UpdateRun(ctx, r, r.Version); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("ledger of job %d: too many concurrent updates", j.JobID)
}

// ledgerStore is the job ledger's Store: every run record it writes says whether its job is in
// progress (store.Run.WaitingIn: queued, serving or served), so a pool's waiting jobs and runs in
// progress are one query.
type ledgerStore struct{ warmpool.Store }

func (s ledgerStore) CreateRun(ctx context.Context, r store.Run) (store.Run, bool, error) {
	return s.Store.CreateRun(ctx, waitingIn(r))
}

func (s ledgerStore) UpdateRun(ctx context.Context, r store.Run, expectVersion int64) (store.Run, error) {
	return s.Store.UpdateRun(ctx, waitingIn(r), expectVersion)
}

// waitingIn sets r.WaitingIn to its job's pool while the job is in progress, and clears it
// otherwise.
func waitingIn(r store.Run) store.Run {
	r.WaitingIn = ""
	if r.Status == warmpool.JobQueued || r.Status == warmpool.JobServing || r.Status == warmpool.JobServed {
		var j struct {
			Pool string `json:"pool"`
		}
		if json.Unmarshal(r.Request, &j) == nil {
			r.WaitingIn = j.Pool
		}
	}
	return r
}
