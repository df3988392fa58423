// Parsing a workflow_job payload and reading the pool a job asks for from its labels. Everything
// here is pure: the fuzz target drives it with arbitrary bytes.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Event is what a workflow_job webhook says about one job.
type Event struct {
	Action         string // queued, waiting, in_progress, completed
	JobID          int64
	RunID          int64
	RunAttempt     int64
	Repository     string // owner/name
	RepositoryID   int64
	InstallationID int64 // 0 when the webhook is not an App's
	Labels         []string
	Status         string
	Conclusion     string
	RunnerName     string // the runner that took the job; empty until one did
	CreatedAt      time.Time
	// WorkflowName is the job's workflow (workflow_job.workflow_name: the workflow file's name:,
	// or its path when it has none); "" when missing or not printable text of at most 256 bytes:
	// it serves the autoscaler only, so a bad one never refuses a job.
	WorkflowName string
	// HeadBranch is the branch of the job's workflow run (workflow_job.head_branch) and
	// DefaultBranch the repository's default branch (repository.default_branch), "" when missing
	// or not printable text of at most 255 bytes: the runner cache's scope reads them (a pool
	// job's run has no OIDC token), so a bad one never refuses a job. GitHub signs the payload.
	HeadBranch, DefaultBranch string
}

// Limits on what a payload may hold; GitHub's own are lower (100 labels of 256 characters).
const (
	maxLabels   = 100
	maxLabelLen = 256
	// maxWorkflowName bounds a workflow name kept for the autoscaler.
	maxWorkflowName = 256
)

type payload struct {
	Action      string `json:"action"`
	WorkflowJob *struct {
		ID         int64    `json:"id"`
		RunID      int64    `json:"run_id"`
		RunAttempt int64    `json:"run_attempt"`
		Labels     []string `json:"labels"`
		Status     string   `json:"status"`
		Conclusion *string  `json:"conclusion"`
		RunnerName *string  `json:"runner_name"`
		CreatedAt  *string  `json:"created_at"`
		// https://docs.github.com/en/webhooks/webhook-events-and-payloads#workflow_job:
		// workflow_job.workflow_name, "The name of the workflow" (nullable).
		// Read apart, so that a value of another type leaves the name out, not the job.
		WorkflowName json.RawMessage `json:"workflow_name"`
		// workflow_job.head_branch, "The name of the current branch" (nullable); read apart too.
		HeadBranch json.RawMessage `json:"head_branch"`
	} `json:"workflow_job"`
	Repository *struct {
		ID       int64  `json:"id"`
		FullName string `json:"full_name"`
		// repository.default_branch, "The default branch of the repository"; read apart too.
		DefaultBranch json.RawMessage `json:"default_branch"`
	} `json:"repository"`
	Installation *struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

// ErrMalformed marks a payload that is not a usable workflow_job event.
var ErrMalformed = errors.New("malformed workflow_job payload")

// ParseWorkflowJob parses a workflow_job payload and checks what routing relies on. Unknown fields
// are fine (GitHub adds fields); missing or ill-typed ones the route needs are an ErrMalformed
// error that says which.
func ParseWorkflowJob(body []byte) (Event, error) {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if p.Action == "" {
		bad("action is missing")
	}
	if p.WorkflowJob == nil {
		bad("workflow_job is missing")
	}
	if p.Repository == nil {
		bad("repository is missing")
	}
	if len(problems) > 0 {
		return Event{}, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	wj, repo := p.WorkflowJob, p.Repository
	ev := Event{
		Action: p.Action, JobID: wj.ID, RunID: wj.RunID, RunAttempt: wj.RunAttempt, Labels: wj.Labels,
		Status: wj.Status, Repository: repo.FullName, RepositoryID: repo.ID,
	}
	if wj.Conclusion != nil {
		ev.Conclusion = *wj.Conclusion
	}
	if wj.RunnerName != nil {
		ev.RunnerName = *wj.RunnerName
	}
	var w string
	if json.Unmarshal(wj.WorkflowName, &w) == nil && len(w) <= maxWorkflowName && utf8.ValidString(w) &&
		!strings.ContainsFunc(w, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		ev.WorkflowName = w
	}
	ev.HeadBranch, ev.DefaultBranch = branchName(wj.HeadBranch), branchName(repo.DefaultBranch)
	if p.Installation != nil {
		ev.InstallationID = p.Installation.ID
	}
	if wj.ID <= 0 || wj.RunID <= 0 {
		bad("workflow_job.id and workflow_job.run_id must be positive")
	}
	if owner, name, ok := strings.Cut(repo.FullName, "/"); !ok || owner == "" || name == "" || strings.Contains(name, "/") ||
		strings.ContainsFunc(repo.FullName, func(r rune) bool { return r <= ' ' || r == 0x7f }) || len(repo.FullName) > 200 {
		bad("repository.full_name %q is not owner/name", repo.FullName)
	}
	if len(wj.Labels) > maxLabels {
		bad("%d labels: at most %d", len(wj.Labels), maxLabels)
	}
	for _, l := range wj.Labels {
		if l == "" || len(l) > maxLabelLen || !utf8.ValidString(l) || strings.ContainsFunc(l, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			bad("label %q: want 1-%d printable characters", truncate(l, 40), maxLabelLen)
			break
		}
	}
	if wj.CreatedAt != nil && *wj.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339, *wj.CreatedAt)
		if err != nil {
			bad("workflow_job.created_at %q is not an RFC 3339 time", truncate(*wj.CreatedAt, 40))
		}
		ev.CreatedAt = t
	}
	if len(problems) > 0 {
		return Event{}, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	return ev, nil
}

// maxBranch bounds a branch name kept for the cache's scope (git allows longer; GitHub's UI not).
const maxBranch = 255

// branchName is a JSON string that is printable text of at most maxBranch bytes, else "".
func branchName(raw json.RawMessage) string {
	var b string
	if json.Unmarshal(raw, &b) != nil || len(b) > maxBranch || !utf8.ValidString(b) ||
		strings.ContainsFunc(b, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return ""
	}
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// DependabotLabel is the label GitHub's Dependabot jobs on self-hosted runners ask for. It names
// no pool by itself: a deployment answers it only when it has a pool for it (Config.DependabotPool).
const DependabotLabel = "dependabot"

// DependabotPool is the pool a bare "dependabot" label asks for by default.
const DependabotPool = "dependabot"

// poolNameRE is a warm pool name (internal/declared.ValidateName).
var poolNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Ask is what a job's runs-on labels ask of this deployment's warm pools.
type Ask struct {
	// Pool is the pool asked for; "" when none.
	Pool string
	// Ours says the pool was asked for in this deployment's own syntax, a "pool=NAME" label: a job
	// asking so for a pool that does not exist fails clearly. Otherwise the pool was named inside a
	// label of another product's syntax ("runs-on=RUN_ID/pool=NAME", as RunsOn writes them), and
	// the job is served only when the pool exists; else it is left to whoever serves it.
	Ours bool
	// Dependabot says the job asks for no pool but carries the bare label "dependabot": it is this
	// deployment's only when the deployment has a pool for Dependabot's jobs.
	Dependabot bool
}

// PoolFromLabels returns what a job's runs-on labels ask of the warm pools. A "pool=NAME" label
// asks for pool NAME in this deployment's syntax; a label holding "pool=NAME" as one of its
// "/"-separated parts ("runs-on/pool=NAME", "runs-on=RUN_ID/pool=NAME") asks for it in another
// product's syntax, and counts only when no "pool=NAME" label does; the bare "dependabot" label
// is reported apart (Ask.Dependabot). Labels are case-insensitive, so NAME is lower-cased. Only
// this deployment's syntax is an error: two different pools, or a name that cannot be a pool's.
// Another product's labels never are: what they ask is left alone when it is not clear.
func PoolFromLabels(labels []string) (Ask, error) {
	var ours, theirs []string
	dependabot := false
	for _, l := range labels {
		l = strings.TrimSpace(l)
		if strings.EqualFold(l, DependabotLabel) {
			dependabot = true
			continue
		}
		if key, name, ok := strings.Cut(l, "="); ok && !strings.Contains(l, "/") && strings.EqualFold(strings.TrimSpace(key), "pool") {
			name = strings.ToLower(strings.TrimSpace(name))
			if !poolNameRE.MatchString(name) {
				return Ask{}, fmt.Errorf("label %q asks for pool %q, which is not a valid pool name (1-63 lower-case letters, digits, '-' or '_')", truncate(l, 80), truncate(name, 80))
			}
			ours = append(ours, name)
			continue
		}
		for part := range strings.SplitSeq(l, "/") {
			key, name, ok := strings.Cut(part, "=")
			if name = strings.ToLower(strings.TrimSpace(name)); ok && strings.EqualFold(strings.TrimSpace(key), "pool") && poolNameRE.MatchString(name) {
				theirs = append(theirs, name)
			}
		}
	}
	slices.Sort(ours)
	ours = slices.Compact(ours)
	slices.Sort(theirs)
	theirs = slices.Compact(theirs)
	switch {
	case len(ours) > 1:
		return Ask{}, fmt.Errorf("labels ask for several pools (%s): a job runs in one pool", strings.Join(ours, ", "))
	case len(ours) == 1:
		return Ask{Pool: ours[0], Ours: true}, nil
	case len(theirs) == 1:
		return Ask{Pool: theirs[0]}, nil
	}
	return Ask{Dependabot: dependabot}, nil
}
