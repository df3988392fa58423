// Pool jobs: the workflow jobs routed to warm pools by a webhook or a scale set, as the job queue
// carries them (EncodeJob, DecodeJob) and as the job ledger records them. Package pooljob writes
// the ledger; package poolsize reads it (a pool's waiting jobs, a job's start).
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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
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

// LedgerKey is the key of the job's ledger record.
func (j Job) LedgerKey() string { return LedgerPrefix + j.key() }

// LedgerKey is the ledger record's key of the pool job an instance's run id (RunKey) names: the
// record that holds what the job's source said of its run (repository, event, ref), which the
// runner cache's scope reads. ok is false for a run id that is not a pool job's.
func LedgerKey(runKey string) (string, bool) {
	rest, ok := strings.CutPrefix(runKey, JobRunPrefix)
	if !ok || rest == "" {
		return "", false
	}
	return LedgerPrefix + rest, true
}

// LedgerPrefix prefixes the key of a job's ledger record: "pooljob:<key>", where RunKey is
// "job:<key>".
const LedgerPrefix = "pooljob:"

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

// Sources of the instance that served a pool job.
const (
	SourceHot     = "hot"
	SourceStarted = "started"
	SourceCreated = "created"
	// SourceAdopted: an instance an interrupted attempt picked, whose agent had registered already.
	SourceAdopted = "adopted"
)

// JobResult is the ledger's result of a served job.
type JobResult struct {
	InstanceID string    `json:"instanceId"`
	Source     string    `json:"source"` // SourceHot, SourceStarted or SourceCreated
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"` // why the job was re-queued, cancelled or abandoned
	// RunnerID is the just-in-time runner the job's instance was given (0: unknown), withdrawn
	// when a scale set job's instance never comes up.
	RunnerID int64 `json:"runnerId,omitempty"`
	// Handed is the instance brought up for this scale set job while another job's ledger names it
	// (Bind moved it there: this job started on another job's runner, or another job on this
	// one's): this job's completion leaves it alone, to the completion of the job it serves.
	Handed string `json:"handed,omitempty"`
}
