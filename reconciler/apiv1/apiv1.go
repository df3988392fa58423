// Package apiv1 holds the JSON bodies of the reconciler's HTTP API, version 1, shared by the server
// (reconciler/api) and the workflow-side client (reconciler/client). Field names are snake_case and
// stable: they are the product's public interface. Durations are integer milliseconds or seconds, as
// the field name says; times are RFC 3339.
package apiv1

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Paths of the API.
const (
	PathProvision = "/v1/provision"
	PathRelease   = "/v1/release"
	PathRuns      = "/v1/runs/" // + run id or run key
	PathPools     = "/v1/pools"
	// PathWebhookGitHub receives GitHub's workflow_job webhooks (warm pools; see internal/webhook).
	PathWebhookGitHub = "/v1/webhooks/github"
	PathHealth        = "/healthz"
	PathReady         = "/readyz"
	PathMetrics       = "/metrics"
)

// ProvisionRequest is the body of POST /v1/provision. The repository, run id and attempt are never
// part of the body: they come from the caller's OIDC token.
type ProvisionRequest struct {
	// Count is the number of runners wanted (1-50).
	Count int `json:"count"`
	// UsageClass is "on-demand" or "spot"; empty: the runner class's, else on-demand. A usage class
	// other than the runner class's is refused (400).
	UsageClass string `json:"usage_class,omitempty"`
	// AllowedInstanceTypes are patterns such as "c*" or "m5.large"; at least one unless the runner
	// class has its own. With the class's patterns, the runners get the types both allow; a pattern
	// that is neither within one of the class's nor covers one is refused (400).
	AllowedInstanceTypes []string `json:"allowed_instance_types,omitempty"`
	// ResourceClass names a configured size; or give CPU and MemoryMiB (minimums), not both.
	ResourceClass string `json:"resource_class,omitempty"`
	CPU           int    `json:"cpu,omitempty"`
	MemoryMiB     int    `json:"memory_mib,omitempty"`
	// RunnerClass picks where runners come from; empty: the deployment's default.
	RunnerClass        string `json:"runner_class,omitempty"`
	AllowBurstable     bool   `json:"allow_burstable,omitempty"`
	FallbackToOnDemand bool   `json:"fallback_to_on_demand,omitempty"`
}

// Sources of a runner in a provision.
const (
	SourceReused  = "reused"  // an idle runner from the pool
	SourceStarted = "started" // a stopped warm-pool instance, started
	SourceCreated = "created" // launched by CreateFleet
	// SourceAdopted: running for the run when a provision its replica abandoned was taken over.
	SourceAdopted = "adopted"
)

// Runner is one runner of a successful provision.
type Runner struct {
	InstanceID   string `json:"instance_id"`
	InstanceType string `json:"instance_type"`
	UsageClass   string `json:"usage_class"`
	Zone         string `json:"zone,omitempty"`
	Source       string `json:"source"`
}

// Undone is an instance a failed provision returned to the pool, terminated, or expired for refresh to terminate.
type Undone struct {
	InstanceID string `json:"instance_id"`
	Action     string `json:"action"` // "returned-to-pool", "terminated" or "expired" (refresh terminates it)
	Reason     string `json:"reason"`
	Error      string `json:"error,omitempty"`
}

// Timing is where a provision's time went, in milliseconds.
type Timing struct {
	SelectMS   int64 `json:"select_ms"`
	StartMS    int64 `json:"start_ms"` // claiming and starting stopped warm-pool instances
	CreateMS   int64 `json:"create_ms"`
	ValidateMS int64 `json:"validate_ms"`
	PostMS     int64 `json:"post_ms"`
	TotalMS    int64 `json:"total_ms"`
}

// Provision statuses.
const (
	StatusProvisioning = "provisioning"
	StatusSucceeded    = "succeeded"
	StatusFailed       = "failed"
	// StatusRolledBack is GET /v1/runs' status of a run whose provision was rolled back because
	// its request ended (a shutdown): the same run attempt may ask again, and is provisioned anew.
	StatusRolledBack = "rolled-back"
)

// ProvisionResponse is the answer to POST /v1/provision: with 200 a succeeded provision, with 503
// (unsuccessful: no capacity, a runner that did not register) or 500 (dump) a failed one, saying
// what was undone. A repeated request of the same run gets the same answer.
type ProvisionResponse struct {
	// RunKey identifies the provision: "<repository id>:<run id>:<attempt>".
	RunKey string `json:"run_key"`
	// Label is the runners' unique label: "<run id>-<attempt>", the run attempt's own
	// (runs-on: ${{ github.run_id }}-${{ github.run_attempt }}, or this answer's label).
	Label string `json:"label"`
	// Labels are every label the runners carry, Label first, then "runnerpool", then the runner
	// class's labels.
	Labels  []string `json:"labels"`
	Status  string   `json:"status"`
	Outcome string   `json:"outcome,omitempty"` // failed provisions: "unsuccessful", "dump" or "taken-over"
	Error   string   `json:"error,omitempty"`
	Runners []Runner `json:"runners"`
	Undone  []Undone `json:"undone,omitempty"`
	Timing  Timing   `json:"timing"`
}

// InstanceIDs lists the runners' instance ids in order.
func (p ProvisionResponse) InstanceIDs() []string {
	ids := make([]string, len(p.Runners))
	for i, r := range p.Runners {
		ids[i] = r.InstanceID
	}
	return ids
}

// ReleaseRequest is the body of POST /v1/release (every field optional; an empty body is {}).
// The run is the caller's: repository id and run id from the OIDC token.
type ReleaseRequest struct {
	// IdleTimeSeconds is how long the released runners may wait in the pool for the next run;
	// default: the runner class's idle time, else the deployment's.
	IdleTimeSeconds int `json:"idle_time_seconds,omitempty"`
	// Attempt is the run attempt whose provision to release (1 to the token's run_attempt);
	// default: the token's.
	Attempt int `json:"attempt,omitempty"`
	// RunKey, instead of Attempt, names the provision as the provision answered it. It must be
	// the token's repository and run (403 otherwise).
	RunKey string `json:"run_key,omitempty"`
}

// ReleasedInstance is what a release did with one instance.
type ReleasedInstance struct {
	InstanceID string `json:"instance_id"`
	State      string `json:"state"`   // the state the release found (or the one that won a race)
	Outcome    string `json:"outcome"` // pooled, expired, already-released, skipped-unexpected-state, failed
	Reason     string `json:"reason,omitempty"`
}

// ReleaseResponse is the answer to POST /v1/release.
type ReleaseResponse struct {
	RunKey    string             `json:"run_key"`
	Message   string             `json:"message"`
	Instances []ReleasedInstance `json:"instances"`
	// Counts is the number of instances per outcome.
	Counts map[string]int `json:"counts"`
	// ReleasedAt is when the release finished.
	ReleasedAt time.Time `json:"released_at"`
}

// ReleaseRecord is one release of a run, as kept on the run record.
type ReleaseRecord struct {
	At              time.Time          `json:"at"`
	IdleTimeSeconds int                `json:"idle_time_seconds"`
	Message         string             `json:"message"`
	Instances       []ReleasedInstance `json:"instances"`
}

// InstanceStatus is the current record of an instance a run used.
type InstanceStatus struct {
	InstanceID string `json:"instance_id"`
	// State is the record's state while it still belongs to the run (or to no run); "reassigned"
	// once another run owns it (that run is not named).
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	Threshold time.Time `json:"threshold,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Interrupted: EC2 announced the instance's spot interruption (its agent reported the notice)
	// while the run holds it; Reason says when EC2 reclaims it. The jobs on it end then.
	Interrupted bool `json:"interrupted,omitempty"`
}

// StateReassigned is InstanceStatus.State for an instance another run owns now.
const StateReassigned = "reassigned"

// RunResponse is the answer to GET /v1/runs/{run}: what the provision selected, started, created,
// what a release did, and where each instance is now, with times and reasons.
type RunResponse struct {
	RunKey       string             `json:"run_key"`
	RepositoryID string             `json:"repository_id"`
	Repository   string             `json:"repository"`
	RunID        string             `json:"run_id"`
	Attempt      int                `json:"attempt"`
	Status       string             `json:"status"`
	CreatedAt    time.Time          `json:"created_at"`
	UpdatedAt    time.Time          `json:"updated_at"`
	Request      *ProvisionRequest  `json:"request,omitempty"`
	Provision    *ProvisionResponse `json:"provision,omitempty"` // absent while provisioning
	Releases     []ReleaseRecord    `json:"releases,omitempty"`
	Instances    []InstanceStatus   `json:"instances,omitempty"`
}

// PoolCount is the number of live instances of one runner class (and warm pool) by state.
type PoolCount struct {
	RunnerClass string         `json:"runner_class"`
	Pool        string         `json:"pool,omitempty"` // warm pool name; empty for provisioned instances
	States      map[string]int `json:"states"`
	Total       int            `json:"total"`
	// Autoscale is the last decision for a warm pool with an autoscale block; nil otherwise.
	Autoscale *PoolAutoscale `json:"autoscale,omitempty"`
}

// PoolAutoscale is an autoscaled warm pool's last decision (the leader's, kept in the state
// table): the demand it forecast, the targets it set within the schedule window's maxima, and why.
type PoolAutoscale struct {
	DecidedAt     time.Time `json:"decided_at"`
	Forecast      float64   `json:"forecast_jobs_per_minute"`
	TargetHot     int       `json:"target_hot"`
	TargetStopped int       `json:"target_stopped"`
	WindowHot     int       `json:"window_hot"`
	WindowStopped int       `json:"window_stopped"`
	Reasons       []string  `json:"reasons,omitempty"`
	// Conflict says why the queue-time goal cannot be met (the window's maxima or the budget).
	Conflict string `json:"conflict,omitempty"`
	// Inputs are the live signals, start times and prices the decision used; nil for a decision
	// that did not record them.
	Inputs *PoolAutoscaleInputs `json:"inputs,omitempty"`
	// GoalMS is the queue-time goal (p95); QueueP95MS the p95 of the QueueJobs jobs' queue times
	// measured in the last hour (created at GitHub to the runner's registration; none: 0 jobs).
	GoalMS     int64 `json:"queue_time_goal_ms,omitempty"`
	QueueP95MS int64 `json:"queue_time_p95_ms,omitempty"`
	QueueJobs  int   `json:"queue_time_jobs,omitempty"`
}

// PoolAutoscaleInputs are what an autoscale decision read besides the recorded demand.
type PoolAutoscaleInputs struct {
	Waiting         int `json:"waiting"`           // jobs waiting for a runner
	Queued          int `json:"queued"`            // of which queued in the job ledger
	ScaleSetWaiting int `json:"scale_set_waiting"` // jobs the scale sets' statistics count as waiting
	InFlight        int `json:"in_flight"`         // instances on their way to jobs
	// Runs are the workflow runs in progress among the pool's jobs; Fanouts the workflows whose
	// fan-outs were learned from completed runs; Prewarm the hot instances the decision asked for
	// the fan-outs of the runs in progress.
	Runs    int `json:"runs"`
	Fanouts int `json:"fanouts"`
	Prewarm int `json:"prewarm"`
	// Start times (seconds) and where they came from (measured medians or defaults).
	HotStart     float64 `json:"hot_start_s"`
	StoppedStart float64 `json:"stopped_start_s"`
	ColdStart    float64 `json:"cold_start_s"`
	StartsFrom   string  `json:"starts_from"`
	// Prices (USD per hour) and where they came from (the price book or defaults).
	HotPerHour     float64 `json:"hot_per_hour"`
	StoppedPerHour float64 `json:"stopped_per_hour"`
	PricesFrom     string  `json:"prices_from"`
}

// ActiveRun is a run of the caller's repository that holds live instances.
type ActiveRun struct {
	RunKey    string         `json:"run_key"`
	RunID     string         `json:"run_id"`
	Attempt   int            `json:"attempt"`
	States    map[string]int `json:"states"`
	Instances int            `json:"instances"`
}

// PoolsResponse is the answer to GET /v1/pools.
type PoolsResponse struct {
	At     time.Time      `json:"at"`
	Pools  []PoolCount    `json:"pools"`
	Totals map[string]int `json:"totals"`
	// Runs lists the runs of the caller's repository holding live instances.
	Runs []ActiveRun `json:"runs"`
}

// ReadyResponse is the answer to GET /readyz.
type ReadyResponse struct {
	Ready    bool              `json:"ready"`
	Draining bool              `json:"draining"`
	Replica  string            `json:"replica"`
	Leader   bool              `json:"leader"`
	Lease    *LeaseStatus      `json:"lease,omitempty"`
	Checks   map[string]string `json:"checks"` // "ok" or the problem
}

// LeaseStatus is the leader lease as this replica last saw it.
type LeaseStatus struct {
	Name      string    `json:"name"`
	Holder    string    `json:"holder,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Retryable says whether the same request may succeed later (shutting down, throttled, an
	// outage); a client retries only those.
	Retryable bool   `json:"retryable,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Provision is set on a failed provision: what was undone.
	Provision *ProvisionResponse `json:"provision,omitempty"`
	// Release is set on an incomplete release: what happened to each instance.
	Release *ReleaseResponse `json:"release,omitempty"`
	// Quota is set on a provision refused by a limit (429 quota_exceeded).
	Quota *Quota `json:"quota,omitempty"`
}

// Quota says which limit refused a provision. It never tells another repository's usage: Current
// is the caller's own repository's count for the repository limit, and absent for an instance cap
// (whose count is every repository's).
type Quota struct {
	// Limit is repository_runners, deployment_instances or runner_class_instances.
	Limit string `json:"limit"`
	Max   int    `json:"max"`
	// Current is what the caller's repository holds now (runners of its runs), for repository_runners.
	Current *int `json:"current,omitempty"`
	// Asked is how many the refused provision asked for (for an instance cap: how many it had to
	// create after reusing what it could).
	Asked int `json:"asked"`
}

// Error codes.
const (
	// 401: the token is missing or not valid for this deployment.
	CodeMissingToken  = "missing_token"
	CodeInvalidToken  = "invalid_token" // malformed, bad signature, unknown key, other issuer
	CodeTokenExpired  = "token_expired"
	CodeWrongAudience = "wrong_audience"
	CodeInvalidClaims = "invalid_claims" // valid signature but not a GitHub Actions run token
	// 403: a valid token that may not do this.
	CodeNotAllowed      = "repository_not_allowed"
	CodeOtherRepository = "other_repository"
	CodeOtherRun        = "other_run"
	// 400, 404, 405, 409, 413, 415.
	CodeBadRequest       = "bad_request"
	CodeInvalidRequest   = "invalid_request" // the request decoded but is not acceptable
	CodeNotFound         = "not_found"
	CodeRunNotFound      = "run_not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInProgress       = "provision_in_progress"
	CodeBodyTooLarge     = "body_too_large"
	// CodeQuotaExceeded (429, retryable): the provision would pass a limit (Error.Quota says which);
	// nothing was provisioned, and the same run attempt may ask again once runners are released.
	CodeQuotaExceeded    = "quota_exceeded"
	CodeUnsupportedMedia = "unsupported_media_type"
	// 5xx.
	CodeUnsuccessful = "provision_unsuccessful" // 503: no capacity or a runner did not register; undone
	CodeDumped       = "provision_dumped"       // 500: an unexpected error; everything terminated
	// CodeReleaseIncomplete (500, retryable): a control-plane call failed for some instance; the
	// report says which, and a retried release picks them up.
	CodeReleaseIncomplete = "release_incomplete"
	CodeShuttingDown      = "shutting_down" // 503, retryable
	CodeUnavailable       = "unavailable"   // 503, retryable (throttled, issuer unreachable)
	CodeTimeout           = "timeout"       // 504, retryable
	CodeInternal          = "internal"      // 500
)

// RunKey is the key of a provision: the same format as the store's run key.
func RunKey(repositoryID, runID string, attempt int) string {
	return fmt.Sprintf("%s:%s:%d", repositoryID, runID, attempt)
}

// ParseRunKey splits "<repository id>:<run id>:<attempt>".
func ParseRunKey(key string) (repositoryID, runID string, attempt int, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", 0, fmt.Errorf("run key %q: want <repository id>:<run id>:<attempt>", key)
	}
	attempt, err = strconv.Atoi(parts[2])
	if err != nil || attempt < 1 {
		return "", "", 0, fmt.Errorf("run key %q: attempt must be a positive number", key)
	}
	return parts[0], parts[1], attempt, nil
}
