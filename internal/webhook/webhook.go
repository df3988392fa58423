// Package webhook receives GitHub's workflow_job webhooks (POST /v1/webhooks/github) and routes the
// jobs that ask for a warm pool (seed 002, "Webhook-Level Routing"): a queued job of a configured
// pool goes to the pool job queue (package warmpool serves it from there); a queued job asking in
// this deployment's own syntax (pool=NAME) for a pool that does not exist has its run cancelled,
// with the reason logged and answered, so it never waits for a runner that will not come; a
// completed pool job goes to the queue too, so its instance is ended. A label this deployment does
// not own (a bare "dependabot" without a Dependabot pool here, another product's pool label) never
// cancels anything: with an organisation webhook, other fleets serve such jobs. Jobs without a pool
// label are left to step-driven provisions.
//
// Every request is verified with X-Hub-Signature-256 (HMAC-SHA256 of the body with the webhook
// secret, compared in constant time) before anything is parsed; the handler cannot be built
// without a secret. Deliveries are idempotent: the job queue is idempotent by job id (its ledger),
// cancelling a cancelled run changes nothing, and the delivery id is marked (store.MarkOnce) after
// the job was handled, so a redelivery is reported as a duplicate.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// DeliveryMarker marks delivery ids; *store.Store satisfies it.
type DeliveryMarker interface {
	MarkOnce(ctx context.Context, key string, ttl time.Duration) (first bool, _ error)
}

// Pools says whether a pool is configured; *warmpool.Catalog satisfies it.
type Pools interface {
	Known(ctx context.Context, name string) (bool, error)
}

// Jobs is the pool job queue; *pooljob.JobQueue satisfies it.
type Jobs interface {
	Enqueue(ctx context.Context, j warmpool.Job) (string, error)
}

// RunCanceller cancels a workflow run, after checking its job still waits; *ghaccess.Client
// satisfies it.
type RunCanceller interface {
	CancelRun(ctx context.Context, repo string, runID int64) error
	JobStatus(ctx context.Context, repo string, jobID int64) (string, error)
}

// Config configures the handler.
type Config struct {
	// Secret is the webhook secret (required).
	Secret     string
	Deliveries DeliveryMarker
	Pools      Pools
	Jobs       Jobs
	GitHub     RunCanceller
	// Allowed, when set, says whether a repository ("owner/name") may use the warm pools; a job of
	// any other repository is refused (logged and answered, never enqueued). The webhook secret
	// proves GitHub sent the delivery, not that the deployment serves that repository.
	Allowed func(repository string) bool
	// DependabotPool is the warm pool a job with the bare label "dependabot" (and no pool label)
	// asks for: Dependabot's jobs on self-hosted runners ask for that label. Such a job is served
	// only when that pool is configured; empty, or a pool that does not exist, leaves the job
	// alone, since another fleet of the organisation may serve Dependabot's jobs.
	DependabotPool string
	// OnLeftAlone, when set, counts each queued job left alone, by why (LeftDependabot,
	// LeftForeignPool).
	OnLeftAlone func(why string)
	// Reruns, when set, queues the jobs of re-run attempts that ask for a label of their own run
	// (store.RunLabel) as re-run jobs (warmpool.Job.Rerun), for the pool worker to serve through
	// provision.ServeRerun: a provision job that a re-run does not repeat leaves its jobs asking
	// for runners nobody provides.
	Reruns bool
	// DeliveryTTL is how long a delivery id is remembered (default 72 h; GitHub lets a delivery be
	// redelivered for 3 days).
	DeliveryTTL time.Duration
	// MaxBodyBytes bounds a payload (default 1 MiB; a workflow_job payload is a few KiB).
	MaxBodyBytes int64
	// Timeout bounds the handling of one delivery (default 9 s: GitHub gives up after 10 s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Handler is the webhook endpoint.
type Handler struct {
	cfg    Config
	secret []byte
	log    *slog.Logger
}

// New returns the handler. It refuses to build without a secret: an unauthenticated endpoint would
// let anyone launch instances or cancel runs.
func New(cfg Config) (*Handler, error) {
	if strings.TrimSpace(cfg.Secret) == "" {
		return nil, errors.New("github webhook: a webhook secret is required")
	}
	if cfg.Deliveries == nil || cfg.Pools == nil || cfg.Jobs == nil || cfg.GitHub == nil {
		return nil, errors.New("github webhook: deliveries, pools, job queue and GitHub are required")
	}
	if cfg.DeliveryTTL <= 0 {
		cfg.DeliveryTTL = 72 * time.Hour
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 9 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{cfg: cfg, secret: []byte(cfg.Secret), log: cfg.Logger}, nil
}

// Results of a delivery, as answered in Response.Result.
const (
	ResultEnqueued  = "enqueued"  // the job is on the pool job queue
	ResultDuplicate = "duplicate" // the job queue knows the job already: nothing done
	ResultCancelled = "cancelled" // the job asked for an unknown pool: its run was cancelled
	ResultIgnored   = "ignored"   // nothing for warm pools in this delivery
	ResultRefused   = "refused"   // the repository may not use this deployment
	ResultPong      = "pong"
)

// Response is the JSON answer to a delivery (GitHub shows it in the delivery log).
type Response struct {
	Delivery string `json:"delivery,omitempty"`
	Event    string `json:"event,omitempty"`
	Action   string `json:"action,omitempty"`
	Job      int64  `json:"job,omitempty"`
	Pool     string `json:"pool,omitempty"`
	Result   string `json:"result,omitempty"`
	// Redelivery is true when this delivery id was handled before.
	Redelivery bool   `json:"redelivery,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ServeHTTP handles one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, Response{Error: "use POST"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			reply(w, http.StatusRequestEntityTooLarge, Response{Error: fmt.Sprintf("payload larger than %d bytes", h.cfg.MaxBodyBytes)})
			return
		}
		reply(w, http.StatusBadRequest, Response{Error: "reading the payload: " + err.Error()})
		return
	}
	// Nothing about the request is trusted, or even parsed, before the signature checks out.
	if err := h.verify(r.Header.Get("X-Hub-Signature-256"), body); err != nil {
		h.log.Warn("github webhook refused", "remote", r.RemoteAddr, "err", err)
		reply(w, http.StatusUnauthorized, Response{Error: err.Error()})
		return
	}
	// GitHub signs the body as sent, in either of the webhook's content types.
	if body, err = payloadOf(r.Header.Get("Content-Type"), body); err != nil {
		reply(w, http.StatusUnsupportedMediaType, Response{Error: err.Error()})
		return
	}
	resp := Response{Delivery: r.Header.Get("X-GitHub-Delivery"), Event: r.Header.Get("X-GitHub-Event")}
	switch {
	case resp.Event == "":
		reply(w, http.StatusBadRequest, Response{Delivery: resp.Delivery, Error: "X-GitHub-Event header is missing"})
		return
	case resp.Delivery == "" || len(resp.Delivery) > 128:
		reply(w, http.StatusBadRequest, Response{Event: resp.Event, Error: "X-GitHub-Delivery header is missing or too long"})
		return
	case resp.Event == "ping":
		resp.Result = ResultPong
		reply(w, http.StatusOK, resp)
		return
	case resp.Event != "workflow_job":
		resp.Result, resp.Reason = ResultIgnored, "only workflow_job events are routed"
		reply(w, http.StatusOK, resp)
		return
	}
	ev, err := ParseWorkflowJob(body)
	if err != nil {
		resp.Error = err.Error()
		reply(w, http.StatusBadRequest, resp)
		return
	}
	resp.Action, resp.Job = ev.Action, ev.JobID
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	status := h.route(ctx, ev, &resp)
	if status == http.StatusOK && resp.Result != ResultIgnored {
		// Marked only once the job is handled: a failure before this point leaves the delivery
		// unmarked, and its redelivery is handled in full.
		first, err := h.cfg.Deliveries.MarkOnce(ctx, "delivery:"+resp.Delivery, h.cfg.DeliveryTTL)
		if err != nil {
			h.log.Warn("github webhook: delivery handled but not marked", "delivery", resp.Delivery, "err", err)
		}
		resp.Redelivery = err == nil && !first
	}
	reply(w, status, resp)
}

// route handles a verified workflow_job event and returns the HTTP status.
func (h *Handler) route(ctx context.Context, ev Event, resp *Response) int {
	if ev.Action != warmpool.ActionQueued && ev.Action != warmpool.ActionCompleted {
		resp.Result, resp.Reason = ResultIgnored, "action "+ev.Action+" needs nothing"
		return http.StatusOK
	}
	ask, perr := PoolFromLabels(ev.Labels)
	if ask.Dependabot {
		ask.Pool = h.cfg.DependabotPool
	}
	poolName := ask.Pool
	resp.Pool = poolName
	log := h.log.With("delivery", resp.Delivery, "job", ev.JobID, "run", ev.RunID, "repository", ev.Repository)
	switch {
	case perr == nil && poolName == "" && ask.Dependabot:
		return h.leaveAlone(ev, LeftDependabot, "the job's bare dependabot label names no pool of this deployment", resp, log)
	case perr == nil && poolName == "" && h.rerun(ev):
		return h.routeRerun(ctx, ev, resp, log)
	case perr == nil && poolName == "":
		resp.Result, resp.Reason = ResultIgnored, "the job asks for no warm pool"
		return http.StatusOK
	case ev.Action == warmpool.ActionCompleted && perr != nil:
		// Never served by a pool: nothing to end.
		resp.Result, resp.Reason = ResultIgnored, perr.Error()
		return http.StatusOK
	case perr != nil:
		return h.fail(ctx, ev, perr.Error(), resp, log)
	}
	if ev.Action == warmpool.ActionQueued && h.cfg.Allowed != nil && !h.cfg.Allowed(ev.Repository) {
		log.Warn("github webhook: job of a repository not allowed to use this deployment", "pool", poolName)
		resp.Result, resp.Reason = ResultRefused, "repository "+ev.Repository+" is not allowed to use this deployment"
		return http.StatusForbidden
	}
	known, err := h.cfg.Pools.Known(ctx, poolName)
	switch {
	case err != nil:
		log.Error("github webhook: pools not readable", "err", err)
		resp.Error = "warm pools could not be read; redeliver later"
		return http.StatusServiceUnavailable
	case !known && ev.Action == warmpool.ActionCompleted:
		// No pool served it: nothing to end, and nothing to queue.
		resp.Result, resp.Reason = ResultIgnored, fmt.Sprintf("warm pool %q is not configured: nothing to end", poolName)
		return http.StatusOK
	case !known && ask.Dependabot:
		return h.leaveAlone(ev, LeftDependabot, fmt.Sprintf("the job's bare dependabot label means warm pool %q here, which is not configured", poolName), resp, log)
	case !known && !ask.Ours:
		return h.leaveAlone(ev, LeftForeignPool, fmt.Sprintf("warm pool %q, named in another product's label, is not configured here", poolName), resp, log)
	case !known:
		return h.fail(ctx, ev, fmt.Sprintf("the job asks for warm pool %q, which is not configured", poolName), resp, log)
	}
	job := warmpool.Job{
		Action: ev.Action, JobID: ev.JobID, RunID: ev.RunID, RunAttempt: ev.RunAttempt, Repository: ev.Repository,
		RepositoryID: ev.RepositoryID, InstallationID: ev.InstallationID, Labels: ev.Labels, Pool: poolName,
		RunnerName: ev.RunnerName, Conclusion: ev.Conclusion, DeliveryID: resp.Delivery, CreatedAt: ev.CreatedAt,
		Workflow: ev.WorkflowName, Ref: cache.BranchRef(ev.HeadBranch), DefaultBranch: cache.BranchRef(ev.DefaultBranch),
	}
	result, err := h.cfg.Jobs.Enqueue(ctx, job)
	if err != nil {
		log.Error("github webhook: pool job not enqueued", "pool", poolName, "err", err)
		resp.Error = "the job could not be queued; redeliver later"
		return http.StatusServiceUnavailable
	}
	resp.Result = result
	log.Info("github webhook: pool job routed", "action", ev.Action, "pool", poolName, "result", result)
	return http.StatusOK
}

// rerun says whether a queued job of a re-run attempt asks for a label of its own run
// (store.RunLabel: "<run id>-<attempt>", the attempt 1 to its own), which step-driven provisions
// give their runners: provision.ServeRerun then decides whether that label still has runners. The
// label alone proves nothing: it is matched only against the run id GitHub signed.
func (h *Handler) rerun(ev Event) bool {
	if !h.cfg.Reruns || ev.Action != warmpool.ActionQueued || ev.RunAttempt < 2 {
		return false
	}
	return slices.ContainsFunc(ev.Labels, func(l string) bool {
		k := store.AttemptOfLabel(strings.TrimSpace(l), strconv.FormatInt(ev.RunID, 10))
		return k >= 1 && int64(k) <= ev.RunAttempt
	})
}

// routeRerun queues a re-run's job for the pool worker, which serves it through the step path's
// provision (warmpool.Job.Rerun).
func (h *Handler) routeRerun(ctx context.Context, ev Event, resp *Response, log *slog.Logger) int {
	if h.cfg.Allowed != nil && !h.cfg.Allowed(ev.Repository) {
		resp.Result, resp.Reason = ResultIgnored, "the job asks for no warm pool, and its repository may not use this deployment"
		return http.StatusOK
	}
	job := warmpool.Job{
		Action: ev.Action, JobID: ev.JobID, RunID: ev.RunID, RunAttempt: ev.RunAttempt, Repository: ev.Repository,
		RepositoryID: ev.RepositoryID, InstallationID: ev.InstallationID, Labels: ev.Labels, Rerun: true,
		DeliveryID: resp.Delivery, CreatedAt: ev.CreatedAt, Workflow: ev.WorkflowName,
	}
	result, err := h.cfg.Jobs.Enqueue(ctx, job)
	if err != nil {
		log.Error("github webhook: re-run job not enqueued", "err", err)
		resp.Error = "the job could not be queued; redeliver later"
		return http.StatusServiceUnavailable
	}
	resp.Result, resp.Reason = result, "a re-run's job asking for a label of its run"
	log.Info("github webhook: re-run job routed", "attempt", ev.RunAttempt, "labels", ev.Labels, "result", result)
	return http.StatusOK
}

// Why a job whose labels look like a warm pool's was left alone (Config.OnLeftAlone).
const (
	// LeftDependabot: a bare "dependabot" label, and this deployment has no pool for it.
	LeftDependabot = "dependabot"
	// LeftForeignPool: another product's label names a pool this deployment does not have.
	LeftForeignPool = "foreign_pool"
)

// leaveAlone answers a job whose labels are not this deployment's to judge: nothing is queued and
// its run is never cancelled, since another runner fleet of the organisation may serve it. A
// queued one is logged and counted.
func (h *Handler) leaveAlone(ev Event, why, reason string, resp *Response, log *slog.Logger) int {
	resp.Result, resp.Reason = ResultIgnored, reason+": left to whoever serves it"
	if ev.Action == warmpool.ActionQueued {
		log.Info("github webhook: job left alone", "why", why, "reason", reason, "labels", ev.Labels)
		if h.cfg.OnLeftAlone != nil {
			h.cfg.OnLeftAlone(why)
		}
	}
	return http.StatusOK
}

// fail makes a job that cannot be served fail clearly: GitHub has no API to fail a single job, so
// its run is cancelled, and the reason is logged and answered.
func (h *Handler) fail(ctx context.Context, ev Event, reason string, resp *Response, log *slog.Logger) int {
	// A late or redelivered queued event of a job that has completed meanwhile: the run's other jobs
	// may still be running, and nothing waits for this one. Unknown status: cancel, so that nothing
	// hangs.
	status, serr := h.cfg.GitHub.JobStatus(ctx, ev.Repository, ev.JobID)
	if serr == nil && status == "completed" {
		log.Info("github webhook: job of an unservable pool already completed: run not cancelled", "reason", reason)
		resp.Result, resp.Reason = ResultIgnored, reason+"; the job already completed: run not cancelled"
		return http.StatusOK
	}
	if serr != nil {
		log.Warn("github webhook: job status not read; cancelling its run anyway", "err", serr)
	}
	resp.Reason = reason + ": run cancelled"
	err := h.cfg.GitHub.CancelRun(ctx, ev.Repository, ev.RunID)
	var er *github.ErrorResponse
	if err != nil && !(errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusConflict) {
		log.Error("github webhook: run of an unservable job not cancelled", "reason", reason, "err", err)
		resp.Error = "cancelling the run failed; redeliver later: " + err.Error()
		return http.StatusBadGateway
	}
	// 409: the run had finished already. Either way nothing will wait for this job.
	log.Warn("github webhook: run cancelled", "reason", reason)
	resp.Result = ResultCancelled
	return http.StatusOK
}

// payloadOf returns the JSON payload of a delivery: the body itself (application/json), or its
// payload field (application/x-www-form-urlencoded), the two content types a GitHub webhook offers,
// as go-github's ValidatePayloadFromBody reads them.
func payloadOf(contentType string, body []byte) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if contentType == "" {
		mt, err = "application/json", nil
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("content type %q: %w", contentType, err)
	case mt == "application/json":
		return body, nil
	case mt == "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("form-encoded payload: %w", err)
		}
		if p := form.Get("payload"); p != "" {
			return []byte(p), nil
		}
		return nil, errors.New("form-encoded delivery without a payload field")
	}
	return nil, fmt.Errorf("content type %q: want application/json or application/x-www-form-urlencoded", mt)
}

// verify checks X-Hub-Signature-256 against the body, in constant time.
func (h *Handler) verify(sig string, body []byte) error {
	hexSum, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return errors.New("X-Hub-Signature-256 header is missing or not sha256=<hex>")
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil || len(got) != sha256.Size {
		return errors.New("X-Hub-Signature-256 is not a hex SHA-256 HMAC")
	}
	mac := hmac.New(sha256.New, h.secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("X-Hub-Signature-256 does not match the payload")
	}
	return nil
}

func reply(w http.ResponseWriter, status int, resp Response) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}
