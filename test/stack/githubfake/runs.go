// Workflow runs with dependent jobs, their attempts and GitHub's three ways to re-run them.
//
// What GitHub publishes, and this file copies:
//   - A job waits for the jobs it needs; it runs once they all succeeded, or whatever they
//     concluded with `if: always()`; otherwise it is skipped. Its runs-on expressions are evaluated
//     when it is queued: ${{ needs.X.outputs.Y }} from X's outputs, ${{ github.run_id }},
//     ${{ github.run_attempt }} (docs.github.com, actions/reference/workflows-and-actions/contexts).
//   - github.run_attempt is "a unique number for each attempt of a particular workflow run in a
//     repository. This number begins at 1 for the workflow run's first attempt, and increments with
//     each re-run"; every job of the new attempt, and its OIDC token's run_attempt claim, carries it
//     (actions/reference/security/oidc); a re-run job is a new job (a new id) of that attempt, and
//     its workflow_job webhooks say run_attempt N.
//   - "Re-run all jobs" (POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun) runs every job
//     again. "Re-run failed jobs" (.../rerun-failed-jobs: "all of the failed jobs and their
//     dependent jobs") and "re-run a job" (POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun:
//     "a job and its dependent jobs") re-run only those: "Jobs that aren't included keep their
//     outputs from the previous attempt, which the newly run jobs can use"
//     (actions/managing-workflow-runs/re-running-workflows-and-jobs). Each answers 201; a run that
//     has not completed, or (failed jobs) has nothing failed in its latest attempt, is refused (403).
//   - A run can be re-run at most 50 times.
package githubfake

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// WorkflowJob is one job of a workflow that StartRun runs.
type WorkflowJob struct {
	Name  string
	Needs []string
	// RunsOn are the job's runs-on labels. ${{ github.run_id }}, ${{ github.run_attempt }} and
	// ${{ needs.<job>.outputs.<name> }} are evaluated when the job is queued; an unknown value is
	// the empty string, as in GitHub's expressions.
	RunsOn []string
	// Always is `if: always()`: the job runs whatever its needs concluded. Otherwise a need that
	// did not succeed skips it.
	Always bool
	// FailIn are the attempts in which the job's own steps fail: its runner completes it, and
	// GitHub records it as failed.
	FailIn []int64
}

// maxReruns is GitHub's limit of re-runs of one workflow run.
const maxReruns = 50

type runRec struct {
	id       int64
	repo     *repoRec
	attempt  int64
	workflow []WorkflowJob
	// latest is the job id of each workflow job in the current attempt: run in it, or carried
	// from an earlier attempt by a partial re-run; 0 while it waits for its needs.
	latest map[string]int64
}

// StartRun starts a workflow run of owner/repo (attempt 1) and returns its id. Jobs without
// needs are queued at once; the others as their needs complete. Jobs GitHub would run on its own
// runners (ubuntu-latest) wait for the test to play them (CompleteJob).
func (s *Server) StartRun(owner, repo string, jobs []WorkflowJob) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	run := &runRec{id: s.newIDLocked(), repo: s.ensureRepoLocked(owner, repo), attempt: 1, latest: map[string]int64{}}
	for _, wj := range jobs {
		wj.Needs, wj.RunsOn, wj.FailIn = slices.Clone(wj.Needs), slices.Clone(wj.RunsOn), slices.Clone(wj.FailIn)
		run.workflow = append(run.workflow, wj)
		run.latest[wj.Name] = 0
	}
	if s.runs == nil {
		s.runs = map[int64]*runRec{}
	}
	s.runs[run.id] = run
	s.advanceRunLocked(run)
	s.broadcastLocked()
	return run.id
}

// RunJobs returns the jobs of a run's current attempt by name: run in it, or carried from an
// earlier attempt by a partial re-run. A job still waiting for its needs is absent.
func (s *Server) RunJobs(runID int64) (attempt int64, jobs map[string]Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	run, ok := s.runs[runID]
	if !ok {
		return 0, nil
	}
	jobs = map[string]Job{}
	for name, id := range run.latest {
		if j, ok := s.jobs[id]; ok {
			jobs[name] = j.snapshot()
		}
	}
	return run.attempt, jobs
}

// CompleteJob completes a queued or running job with conclusion and the outputs its steps set:
// what a GitHub-hosted runner does with the jobs the test plays.
func (s *Server) CompleteJob(id int64, conclusion string, outputs map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok || j.Status == JobCompleted {
		return fmt.Errorf("job %d is not queued or running", id)
	}
	s.queue = slices.DeleteFunc(s.queue, func(q int64) bool { return q == id })
	if j.Status == JobQueued {
		j.StartedAt = s.now().UTC()
	}
	j.Status, j.Conclusion, j.CompletedAt = JobCompleted, conclusion, s.now().UTC()
	j.Outputs = maps.Clone(outputs)
	s.completedLocked(j)
	s.broadcastLocked()
	return nil
}

// completedLocked announces a job that just completed and applies it to its run: its own steps'
// failure first, then the jobs that waited for it.
func (s *Server) completedLocked(j *jobRec) {
	run, ok := s.runs[j.RunID]
	if wj := run.job(j.Name); ok && wj != nil && j.Conclusion == "success" && slices.Contains(wj.FailIn, j.RunAttempt) {
		j.Conclusion = "failure"
	}
	s.emitLocked(j, "completed")
	if ok {
		s.advanceRunLocked(run)
	}
}

func (r *runRec) job(name string) *WorkflowJob {
	if r == nil {
		return nil
	}
	for i := range r.workflow {
		if r.workflow[i].Name == name {
			return &r.workflow[i]
		}
	}
	return nil
}

// advanceRunLocked queues (or skips) every waiting job whose needs have all completed, until
// nothing changes (a skip can release the jobs that need it).
func (s *Server) advanceRunLocked(run *runRec) {
	for changed := true; changed; {
		changed = false
		for _, wj := range run.workflow {
			if run.latest[wj.Name] != 0 {
				continue
			}
			ready, ok := true, true
			for _, need := range wj.Needs {
				nj, exists := s.jobs[run.latest[need]]
				if !exists || nj.Status != JobCompleted {
					ready = false
					break
				}
				ok = ok && nj.Conclusion == "success"
			}
			if !ready {
				continue
			}
			j := &jobRec{repo: run.repo, Job: Job{
				ID: s.newIDLocked(), RunID: run.id, RunAttempt: run.attempt, Owner: run.repo.owner.login, Repo: run.repo.name,
				Name: wj.Name, Status: JobQueued, QueuedAt: s.now().UTC(),
			}}
			for _, l := range wj.RunsOn {
				j.Labels = append(j.Labels, s.expandLocked(run, l))
			}
			s.jobs[j.ID] = j
			run.latest[wj.Name] = j.ID
			changed = true
			if !ok && !wj.Always {
				j.Status, j.Conclusion, j.StartedAt, j.CompletedAt = JobCompleted, "skipped", j.QueuedAt, j.QueuedAt
				continue
			}
			s.queue = append(s.queue, j.ID)
			s.emitLocked(j, "queued")
		}
	}
}

var exprRE = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

// expandLocked evaluates the expressions of a runs-on label for the run's current attempt.
func (s *Server) expandLocked(run *runRec, label string) string {
	return exprRE.ReplaceAllStringFunc(label, func(m string) string {
		expr := exprRE.FindStringSubmatch(m)[1]
		switch expr {
		case "github.run_id":
			return strconv.FormatInt(run.id, 10)
		case "github.run_attempt":
			return strconv.FormatInt(run.attempt, 10)
		}
		parts := strings.Split(expr, ".")
		if len(parts) == 4 && parts[0] == "needs" && parts[2] == "outputs" {
			if nj, ok := s.jobs[run.latest[parts[1]]]; ok {
				return nj.Outputs[parts[3]]
			}
		}
		return ""
	})
}

// dependents returns names and every job that needs one of them, directly or not.
func (r *runRec) dependents(names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	for changed := true; changed; {
		changed = false
		for _, wj := range r.workflow {
			if !out[wj.Name] && slices.ContainsFunc(wj.Needs, func(n string) bool { return out[n] }) {
				out[wj.Name], changed = true, true
			}
		}
	}
	return out
}

// rerunLocked starts the run's next attempt, running the jobs in rerun again and carrying the
// others with their results and outputs. It reports why it refused, if it did.
func (s *Server) rerunLocked(run *runRec, rerun map[string]bool) (int, string) {
	for _, id := range run.latest {
		if j, ok := s.jobs[id]; !ok || j.Status != JobCompleted {
			return http.StatusForbidden, "This workflow run is not completed: it cannot be rerun yet."
		}
	}
	if run.attempt > maxReruns {
		return http.StatusForbidden, fmt.Sprintf("This workflow run cannot be rerun: it has been rerun %d times.", maxReruns)
	}
	run.attempt++
	for name := range rerun {
		old := run.latest[name]
		run.latest[name] = 0
		s.reruns = append(s.reruns, Rerun{Owner: run.repo.owner.login, Repo: run.repo.name, RunID: run.id, Job: old})
	}
	s.advanceRunLocked(run)
	for i := range s.reruns {
		if r := &s.reruns[i]; r.RunID == run.id && r.NewJob == 0 && s.jobs[r.Job] != nil {
			r.NewJob = run.latest[s.jobs[r.Job].Name]
		}
	}
	s.broadcastLocked()
	return http.StatusCreated, ""
}

// runOfLocked finds the workflow run of the request's run_id within its repository.
func (s *Server) runOfLocked(r *http.Request, runID int64) *runRec {
	owner, repo := pathScope(r)
	run, ok := s.runs[runID]
	if !ok || !newScope(owner, repo).covers(run.repo.owner.login, run.repo.name) {
		return nil
	}
	return run
}

// rerunRun re-runs every job of a run (POST .../actions/runs/{run_id}/rerun).
func (s *Server) rerunRun(w http.ResponseWriter, r *http.Request, _ *caller) {
	runID, _ := pathInt(r, "run_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	run := s.runOfLocked(r, runID)
	if run == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	all := map[string]bool{}
	for _, wj := range run.workflow {
		all[wj.Name] = true
	}
	s.answerRerun(w, run, all)
}

// rerunFailedOfRun re-runs a workflow run's failed (or cancelled) jobs and their dependents.
func (s *Server) rerunFailedOfRun(w http.ResponseWriter, run *runRec) {
	var failed []string
	for name, id := range run.latest {
		if j, ok := s.jobs[id]; ok && j.Status == JobCompleted && j.Conclusion != "success" && j.Conclusion != "skipped" {
			failed = append(failed, name)
		}
	}
	if len(failed) == 0 {
		writeError(w, http.StatusForbidden, "This workflow run cannot be rerun: it has no failed jobs in its latest attempt.")
		return
	}
	s.answerRerun(w, run, run.dependents(failed))
}

// rerunJob re-runs one job and its dependents (POST .../actions/jobs/{job_id}/rerun); a job queued
// alone (QueueJob) is queued again in the next attempt.
func (s *Server) rerunJob(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobLocked(w, r)
	if j == nil {
		return
	}
	run, ok := s.runs[j.RunID]
	if !ok {
		if j.Status != JobCompleted {
			writeError(w, http.StatusForbidden, "This job is not completed: it cannot be rerun yet.")
			return
		}
		s.requeueLocked([]*jobRec{j}, j.RunAttempt+1)
		writeJSON(w, http.StatusCreated, struct{}{})
		return
	}
	if run.latest[j.Name] != j.ID {
		writeError(w, http.StatusForbidden, "This job is not in the run's latest attempt.")
		return
	}
	s.answerRerun(w, run, run.dependents([]string{j.Name}))
}

func (s *Server) answerRerun(w http.ResponseWriter, run *runRec, rerun map[string]bool) {
	if status, msg := s.rerunLocked(run, rerun); msg != "" {
		writeError(w, status, msg)
		return
	}
	writeJSON(w, http.StatusCreated, struct{}{})
}

// requeueLocked queues jobs that belong to no workflow run again, as new jobs of attempt.
func (s *Server) requeueLocked(old []*jobRec, attempt int64) {
	slices.SortFunc(old, func(a, b *jobRec) int { return int(a.ID - b.ID) })
	for _, o := range old {
		j := &jobRec{repo: o.repo, Job: Job{
			ID: s.newIDLocked(), RunID: o.RunID, RunAttempt: attempt, Owner: o.Owner, Repo: o.Repo, Name: o.Name,
			Labels: slices.Clone(o.Labels), Status: JobQueued, QueuedAt: s.now().UTC(),
		}}
		s.jobs[j.ID] = j
		s.queue = append(s.queue, j.ID)
		s.reruns = append(s.reruns, Rerun{Owner: o.Owner, Repo: o.Repo, RunID: o.RunID, Job: o.ID, NewJob: j.ID})
		s.emitLocked(j, "queued")
	}
	s.broadcastLocked()
}
