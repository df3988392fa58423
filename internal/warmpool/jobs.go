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
package warmpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Job actions, as in the workflow_job webhook.
const (
	ActionQueued    = "queued"
	ActionCompleted = "completed"
)

// Job is one pool job: a workflow job that asked for a warm pool.
type Job struct {
	Action         string   `json:"action"` // ActionQueued or ActionCompleted
	JobID          int64    `json:"jobId"`
	RunID          int64    `json:"runId"`
	RunAttempt     int64    `json:"runAttempt,omitempty"`
	Repository     string   `json:"repository"` // owner/name
	RepositoryID   int64    `json:"repositoryId"`
	InstallationID int64    `json:"installationId,omitempty"`
	Labels         []string `json:"labels"`
	Pool           string   `json:"pool"`
	// RunnerName is the runner that ran a completed job (empty when it never ran).
	RunnerName string `json:"runnerName,omitempty"`
	Conclusion string `json:"conclusion,omitempty"`
	DeliveryID string `json:"deliveryId,omitempty"`
	// CreatedAt is when GitHub queued the job.
	CreatedAt time.Time `json:"createdAt"`
	// ScaleSet, for a job a scale set's listener received (JobID is then the message's runner
	// request id), names the scale set, its id and scope: the runner is minted by the scale set's
	// generatejitconfig instead of the REST API.
	ScaleSet      string `json:"scaleSet,omitempty"`
	ScaleSetID    int64  `json:"scaleSetId,omitempty"`
	ScaleSetScope string `json:"scaleSetScope,omitempty"`
	// ScaleSetJob is the scale set job's jobId, the id its messages share (github.com sends runner
	// request id 0); when set it keys the ledger instead of JobID.
	ScaleSetJob string `json:"scaleSetJob,omitempty"`
	// Event is the event that started the job's workflow run, when the job's source says it (a
	// scale set's job message: eventName); a workflow_job webhook does not carry it.
	Event string `json:"event,omitempty"`
	// Rerun marks a job of a re-run attempt that asks for no pool but for a label of its own run
	// (store.RunLabel) that a provision of the run made: the worker hands it to
	// WorkerConfig.Rerun (provision.ServeRerun), whose run record is its ledger.
	Rerun bool `json:"rerun,omitempty"`
	// Workflow is the job's workflow as its source names it (the webhook's workflow_name, a scale
	// set message's workflow file), "" when unknown. Enqueue keeps it on the job's ledger record
	// (store.Run.Workflow) for the autoscaler; it is not part of the queue message, which
	// DecodeJob reads strictly: a replica of an older release would drop a message carrying it.
	Workflow string `json:"-"`
	// Ref and DefaultBranch are what the job's source says of its run's ref and its repository's
	// default branch (full refs; "" when it says nothing): a webhook's head_branch and
	// repository.default_branch, a scale set message's jobWorkflowRef. Like Workflow, Enqueue keeps
	// them on the ledger record (store.Run.Ref, DefaultBranch), where the runner cache's scope
	// reads them, and they are not part of the queue message.
	Ref, DefaultBranch string `json:"-"`
}

// Trusted reports whether the job's run is known not to run a pull request's code: its event is
// known, and is not pull_request or one of its kin (pull_request_review, ..., which run a fork's
// code without the repository's secrets), pull_request_target excepted (it runs the base
// branch's code, with secrets): pool.TrustedEvent, the step path's rule too. Only a trusted job's
// instance may go back to its repository's pool: whatever it leaves (Docker images above all,
// which a docker class keeps) reaches that repository's next runs, pushes with secrets among them.
func (j Job) Trusted() bool { return pool.TrustedEvent(j.Event) }

// RunKey is the run id of the instance serving the job.
func (j Job) RunKey() string { return JobRunPrefix + j.key() }

func (j Job) ledgerKey() string { return "pooljob:" + j.key() }

// LedgerKey is the ledger record's key of the pool job an instance's run id (RunKey) names: the
// record that holds what the job's source said of its run (repository, event, ref), which the
// runner cache's scope reads. ok is false for a run id that is not a pool job's.
func LedgerKey(runKey string) (string, bool) {
	rest, ok := strings.CutPrefix(runKey, JobRunPrefix)
	if !ok || rest == "" {
		return "", false
	}
	return "pooljob:" + rest, true
}

// key is the job's id in the ledger and run ids: the job id, or for a scale set's job
// "ss<scale set id>-<runner request id>" (request ids are their own id space).
func (j Job) key() string {
	switch {
	case j.ScaleSetID != 0 && j.ScaleSetJob != "":
		return fmt.Sprintf("ss%d-%s", j.ScaleSetID, j.ScaleSetJob)
	case j.ScaleSetID != 0:
		return fmt.Sprintf("ss%d-%d", j.ScaleSetID, j.JobID)
	}
	return strconv.FormatInt(j.JobID, 10)
}

// Validate checks a job's fields.
func (j Job) Validate() error {
	var problems []string
	if j.Action != ActionQueued && j.Action != ActionCompleted {
		problems = append(problems, fmt.Sprintf("action %q is not queued or completed", j.Action))
	}
	if j.JobID <= 0 || j.RunID <= 0 {
		problems = append(problems, "job id and run id must be positive")
	}
	if owner, name, ok := strings.Cut(j.Repository, "/"); !ok || owner == "" || name == "" || strings.ContainsAny(j.Repository, " \t\n") {
		problems = append(problems, fmt.Sprintf("repository %q is not owner/name", j.Repository))
	}
	if (j.Pool == "") != j.Rerun {
		problems = append(problems, "a job names a pool, or is a re-run's")
	}
	if len(j.Labels) == 0 {
		problems = append(problems, "no labels")
	}
	if (j.ScaleSet == "") != (j.ScaleSetID == 0) || (j.ScaleSetID != 0 && j.ScaleSetScope == "") || j.ScaleSetID < 0 {
		problems = append(problems, "a scale set job needs the scale set's name, id and scope")
	}
	if j.ScaleSetJob != "" && (j.ScaleSetID == 0 || len(j.ScaleSetJob) > 128 ||
		strings.ContainsFunc(j.ScaleSetJob, func(r rune) bool { return r <= ' ' || r > '~' })) {
		problems = append(problems, "a scale set job id needs its scale set and up to 128 printable characters")
	}
	if len(problems) > 0 {
		return fmt.Errorf("pool job %d: %s", j.JobID, strings.Join(problems, "; "))
	}
	return nil
}

// EncodeJob renders a job queue message body.
func EncodeJob(j Job) (string, error) {
	if err := j.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return "", fmt.Errorf("encoding pool job %d: %w", j.JobID, err)
	}
	return string(b), nil
}

// DecodeJob parses and validates a job queue message body (unknown fields are refused).
func DecodeJob(body string) (Job, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return Job{}, fmt.Errorf("decoding pool job: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Job{}, errors.New("decoding pool job: trailing data")
	}
	return j, j.Validate()
}

// Ledger statuses of a pool job.
const (
	JobQueued    = "queued"
	JobServing   = "serving"
	JobServed    = "served"
	JobCompleted = "completed"
	JobCancelled = "cancelled"
	JobAbandoned = "abandoned"
)

// served is the ledger's result of a served job.
type served struct {
	InstanceID string    `json:"instanceId"`
	Source     string    `json:"source"` // SourceHot, SourceStarted or SourceCreated
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"` // why the job was re-queued, cancelled or abandoned
	// RunnerID is the just-in-time runner the job's instance was given (0: unknown), withdrawn
	// when a scale set job's instance never comes up.
	RunnerID int64 `json:"runnerId,omitempty"`
	// Handed is the instance brought up for this scale set job that Bind handed to another job,
	// because this job started on that job's runner: this job's completion leaves it alone.
	Handed string `json:"handed,omitempty"`
}

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
	st       Store
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
func NewJobQueue(api JobSQS, url string, st Store) *JobQueue {
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
func (q *JobQueue) Enqueue(ctx context.Context, j Job) (string, error) {
	body, err := EncodeJob(j)
	if err != nil {
		return "", err
	}
	version := int64(0)
	if j.Action == ActionQueued && !j.Rerun {
		r, created, err := q.st.CreateRun(ctx, store.Run{
			Key: j.ledgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
			RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: JobQueued,
			Request: json.RawMessage(body), Workflow: j.Workflow, Event: j.Event, Ref: j.Ref, DefaultBranch: j.DefaultBranch,
		})
		if err != nil {
			return "", fmt.Errorf("recording pool job %d: %w", j.JobID, err)
		}
		if !created && r.Status != JobQueued {
			return Duplicate, nil
		}
		version = r.Version
	}
	if err := q.send(ctx, j, body, version); err != nil {
		return "", err
	}
	return Enqueued, nil
}

func (q *JobQueue) send(ctx context.Context, j Job, body string, version int64) error {
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
	var s served
	_ = json.Unmarshal(r.Result, &s)
	if r.Status != JobServed || s.InstanceID != instanceID {
		return false, nil
	}
	j, err := DecodeJob(string(r.Request))
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
	r.Status, r.Result = JobQueued, mustJSON(s)
	r, err = q.st.UpdateRun(ctx, r, r.Version)
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err != nil || leftToGitHub {
		return err == nil, err
	}
	body, err := EncodeJob(j)
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
	job         Job
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
		msgs[i].job, msgs[i].err = DecodeJob(aws.ToString(m.Body))
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
	st    Store
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
func (l *ledger) begin(ctx context.Context, j Job) (store.Run, int, error) {
	r, created, err := l.st.CreateRun(ctx, store.Run{
		Key: j.ledgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
		RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: JobServing,
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
	case JobQueued:
	case JobServing:
		if l.now().Sub(r.UpdatedAt) < l.lease {
			return r, beginBusy, nil
		}
		outcome = beginTakeover
	default:
		return r, beginDone, nil
	}
	r.Status = JobServing
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
func (l *ledger) set(ctx context.Context, r store.Run, status string, res served) (store.Run, error) {
	r.Status, r.Result = status, mustJSON(res)
	out, err := l.st.UpdateRun(ctx, r, r.Version)
	if err != nil {
		return r, fmt.Errorf("ledger of %s to %s: %w", r.Key, status, err)
	}
	return out, nil
}

// end marks a job completed, whatever its status (creating the entry if the job was never seen).
func (l *ledger) end(ctx context.Context, j Job) error {
	for range 3 {
		r, created, err := l.st.CreateRun(ctx, store.Run{
			Key: j.ledgerKey(), RepositoryID: strconv.FormatInt(j.RepositoryID, 10), Repository: j.Repository,
			RunID: strconv.FormatInt(j.RunID, 10), Attempt: int(max(j.RunAttempt, 1)), Status: JobCompleted,
			Request: json.RawMessage(mustJSON(j)),
		})
		if err != nil || created || r.Status == JobCompleted {
			return err
		}
		r.Status = JobCompleted
		if _, err = l.st.UpdateRun(ctx, r, r.Version); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("ledger of job %d: too many concurrent updates", j.JobID)
}
