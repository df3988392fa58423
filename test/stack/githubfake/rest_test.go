// Tests of the fake's REST API driven through go-github v62, as the reconciler uses it: registration and
// remove tokens, JIT configurations, runners and their labels, runner groups, run cancellation.

package githubfake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

func TestRunnerTokens(t *testing.T) {
	t.Parallel()
	var clk clock
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	gh := tokenClient(t, base, fake.PAT())

	tests := []struct {
		name   string
		create func(ctx context.Context) (string, time.Time, error)
		op     string
	}{
		{"repo registration", func(ctx context.Context) (string, time.Time, error) {
			tok, _, err := gh.Actions.CreateRegistrationToken(ctx, "acme", "app")
			return tok.GetToken(), tok.GetExpiresAt().Time, err
		}, "POST /repos/{owner}/{repo}/actions/runners/registration-token"},
		{"org registration", func(ctx context.Context) (string, time.Time, error) {
			tok, _, err := gh.Actions.CreateOrganizationRegistrationToken(ctx, "acme")
			return tok.GetToken(), tok.GetExpiresAt().Time, err
		}, "POST /orgs/{org}/actions/runners/registration-token"},
		{"repo remove", func(ctx context.Context) (string, time.Time, error) {
			tok, _, err := gh.Actions.CreateRemoveToken(ctx, "acme", "app")
			return tok.GetToken(), tok.GetExpiresAt().Time, err
		}, "POST /repos/{owner}/{repo}/actions/runners/remove-token"},
		{"org remove", func(ctx context.Context) (string, time.Time, error) {
			tok, _, err := gh.Actions.CreateOrganizationRemoveToken(ctx, "acme")
			return tok.GetToken(), tok.GetExpiresAt().Time, err
		}, "POST /orgs/{org}/actions/runners/remove-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, exp, err := tt.create(t.Context())
			if err != nil {
				t.Fatalf("creating token: %v", err)
			}
			if len(tok) != 29 {
				t.Errorf("token %q: want 29 characters like GitHub's", tok)
			}
			if want := t0.Add(time.Hour); !exp.Equal(want) {
				t.Errorf("expires_at = %v, want %v", exp, want)
			}
			if n := fake.Calls()[tt.op]; n < 1 {
				t.Errorf("Calls()[%q] = %d, want at least 1", tt.op, n)
			}
		})
	}
}

// labelNames returns "type:name" of each label, for comparisons that ignore label ids.
func labelNames(ls []*github.RunnerLabels) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.GetType()+":"+l.GetName())
	}
	return out
}

func TestGenerateJITConfig(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())

	tests := []struct {
		name       string
		owner      string
		repo       string
		req        github.GenerateJITConfigRequest
		wantStatus int // 0: success
	}{
		{"repo", "acme", "app", github.GenerateJITConfigRequest{Name: "i-1", RunnerGroupID: 1, Labels: []string{"run-1"}}, 0},
		{"org", "acme", "", github.GenerateJITConfigRequest{Name: "i-2", RunnerGroupID: 1, Labels: []string{"pool=dependabot", "x"}}, 0},
		{"duplicate name", "acme", "app", github.GenerateJITConfigRequest{Name: "dup", RunnerGroupID: 1, Labels: []string{"a"}}, http.StatusConflict},
		{"repo with group 0", "acme", "app", github.GenerateJITConfigRequest{Name: "i-3", Labels: []string{"a"}}, http.StatusUnprocessableEntity},
		{"org with unknown group", "acme", "", github.GenerateJITConfigRequest{Name: "i-4", RunnerGroupID: 99, Labels: []string{"a"}}, http.StatusNotFound},
		{"no labels", "acme", "app", github.GenerateJITConfigRequest{Name: "i-5", RunnerGroupID: 1}, http.StatusUnprocessableEntity},
		{"no name", "acme", "app", github.GenerateJITConfigRequest{RunnerGroupID: 1, Labels: []string{"a"}}, http.StatusUnprocessableEntity},
		{"label with comma", "acme", "app", github.GenerateJITConfigRequest{Name: "i-6", RunnerGroupID: 1, Labels: []string{"a,b"}}, http.StatusUnprocessableEntity},
	}
	if _, _, err := gh.Actions.GenerateRepoJITConfig(t.Context(), "acme", "app", &github.GenerateJITConfigRequest{Name: "dup", RunnerGroupID: 1, Labels: []string{"a"}}); err != nil {
		t.Fatalf("first runner named dup: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg *github.JITRunnerConfig
			var err error
			if tt.repo == "" {
				cfg, _, err = gh.Actions.GenerateOrgJITConfig(t.Context(), tt.owner, &tt.req)
			} else {
				cfg, _, err = gh.Actions.GenerateRepoJITConfig(t.Context(), tt.owner, tt.repo, &tt.req)
			}
			if tt.wantStatus != 0 {
				if got := statusOf(err); got != tt.wantStatus {
					t.Fatalf("status = %d (err %v), want %d", got, err, tt.wantStatus)
				}
				return
			}
			if err != nil {
				t.Fatalf("generating JIT config: %v", err)
			}
			r := cfg.GetRunner()
			want := []string{"read-only:self-hosted", "read-only:Linux", "read-only:X64"}
			for _, l := range tt.req.Labels {
				want = append(want, "custom:"+l)
			}
			if diff := cmp.Diff(want, labelNames(r.Labels)); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if r.GetID() == 0 || r.GetName() != tt.req.Name || r.GetStatus() != "offline" || r.GetBusy() || r.GetOS() != "Linux" {
				t.Errorf("runner = %v, want a new offline idle Linux runner named %s", github.Stringify(r), tt.req.Name)
			}
			raw, err := base64.StdEncoding.DecodeString(cfg.GetEncodedJITConfig())
			if err != nil || !json.Valid(raw) {
				t.Errorf("encoded_jit_config is not base64 JSON: %v", err)
			}
			got := fake.Runners(tt.owner, tt.repo)
			found := false
			for _, fr := range got {
				if fr.ID == r.GetID() {
					found = fr.JIT && fr.Ephemeral && fr.Status == "offline"
				}
			}
			if !found {
				t.Errorf("Runners(%q, %q) = %+v, want the JIT runner %d", tt.owner, tt.repo, got, r.GetID())
			}
		})
	}
}

func TestListGetDeleteRunners(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	ctx := t.Context()
	var ids []int64
	for _, name := range []string{"a", "b", "c"} {
		cfg, _, err := gh.Actions.GenerateRepoJITConfig(ctx, "acme", "app", &github.GenerateJITConfigRequest{Name: name, RunnerGroupID: 1, Labels: []string{"l-" + name}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cfg.GetRunner().GetID())
	}
	if _, _, err := gh.Actions.GenerateOrgJITConfig(ctx, "acme", &github.GenerateJITConfigRequest{Name: "org-runner", RunnerGroupID: 1, Labels: []string{"x"}}); err != nil {
		t.Fatal(err)
	}

	t.Run("paging", func(t *testing.T) {
		t.Parallel()
		var names []string
		opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 2}}
		for pages := 0; ; pages++ {
			rs, resp, err := gh.Actions.ListRunners(t.Context(), "acme", "app", opts)
			if err != nil {
				t.Fatal(err)
			}
			if rs.TotalCount != 3 {
				t.Errorf("total_count = %d, want 3", rs.TotalCount)
			}
			for _, r := range rs.Runners {
				names = append(names, r.GetName())
			}
			if resp.NextPage == 0 || pages > 3 {
				break
			}
			opts.Page = resp.NextPage
		}
		if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
			t.Errorf("names over pages (-want +got):\n%s", diff)
		}
	})
	t.Run("name filter", func(t *testing.T) {
		t.Parallel()
		rs, _, err := gh.Actions.ListRunners(t.Context(), "acme", "app", &github.ListRunnersOptions{Name: github.String("b")})
		if err != nil {
			t.Fatal(err)
		}
		if rs.TotalCount != 1 || rs.Runners[0].GetID() != ids[1] {
			t.Errorf("ListRunners(name=b) = %s, want runner %d only", github.Stringify(rs), ids[1])
		}
	})
	t.Run("org runners are separate", func(t *testing.T) {
		t.Parallel()
		rs, _, err := gh.Actions.ListOrganizationRunners(t.Context(), "acme", nil)
		if err != nil {
			t.Fatal(err)
		}
		if rs.TotalCount != 1 || rs.Runners[0].GetName() != "org-runner" {
			t.Errorf("ListOrganizationRunners = %s, want org-runner only", github.Stringify(rs))
		}
		if _, _, err := gh.Actions.GetOrganizationRunner(t.Context(), "acme", ids[0]); statusOf(err) != http.StatusNotFound {
			t.Errorf("repo runner through the org endpoint: err = %v, want 404", err)
		}
	})
	t.Run("get and delete", func(t *testing.T) {
		t.Parallel()
		// Its own repository, so that the other subtests do not see the deletion.
		cfg, _, err := gh.Actions.GenerateRepoJITConfig(t.Context(), "acme", "other", &github.GenerateJITConfigRequest{Name: "d", RunnerGroupID: 1, Labels: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		id := cfg.GetRunner().GetID()
		r, _, err := gh.Actions.GetRunner(t.Context(), "acme", "other", id)
		if err != nil || r.GetName() != "d" || r.GetStatus() != "offline" {
			t.Fatalf("GetRunner = %v, %v; want offline runner d", r, err)
		}
		if _, _, err := gh.Actions.GetRunner(t.Context(), "acme", "app", id); statusOf(err) != http.StatusNotFound {
			t.Errorf("GetRunner through another repository: %v, want 404", err)
		}
		resp, err := gh.Actions.RemoveRunner(t.Context(), "acme", "other", id)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("RemoveRunner: %v", err)
		}
		if _, _, err := gh.Actions.GetRunner(t.Context(), "acme", "other", id); statusOf(err) != http.StatusNotFound {
			t.Errorf("GetRunner after delete: %v, want 404", err)
		}
		if _, err := gh.Actions.RemoveRunner(t.Context(), "acme", "other", id); statusOf(err) != http.StatusNotFound {
			t.Errorf("second RemoveRunner: %v, want 404", err)
		}
		if got := fake.Runners("acme", "other"); len(got) != 0 {
			t.Errorf("Runners after delete = %+v, want none", got)
		}
	})
}

func TestRunnerLabels(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	cfg, _, err := gh.Actions.GenerateRepoJITConfig(t.Context(), "acme", "app", &github.GenerateJITConfigRequest{Name: "r", RunnerGroupID: 1, Labels: []string{"one"}})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("repos/acme/app/actions/runners/%d/labels", cfg.GetRunner().GetID())
	// go-github v62 has no runner label methods; call the endpoints through its generic client.
	call := func(ctx context.Context, method, p string, body any) ([]string, error) {
		req, err := gh.NewRequest(method, p, body)
		if err != nil {
			return nil, err
		}
		var out struct {
			TotalCount int                    `json:"total_count"`
			Labels     []*github.RunnerLabels `json:"labels"`
		}
		if _, err := gh.Do(ctx, req, &out); err != nil {
			return nil, err
		}
		if out.TotalCount != len(out.Labels) {
			return nil, errors.New("total_count does not match labels")
		}
		return labelNames(out.Labels), nil
	}
	ro := []string{"read-only:self-hosted", "read-only:Linux", "read-only:X64"}
	steps := []struct {
		name       string
		method     string
		path       string
		body       any
		want       []string
		wantStatus int
	}{
		{"get", "GET", path, nil, append(ro, "custom:one"), 0},
		{"add", "POST", path, map[string]any{"labels": []string{"two", "ONE"}}, append(ro, "custom:one", "custom:two"), 0},
		{"add nothing", "POST", path, map[string]any{"labels": []string{}}, nil, http.StatusUnprocessableEntity},
		{"set", "PUT", path, map[string]any{"labels": []string{"three"}}, append(ro, "custom:three"), 0},
		{"remove read-only", "DELETE", path + "/self-hosted", nil, nil, http.StatusUnprocessableEntity},
		{"remove missing", "DELETE", path + "/nope", nil, nil, http.StatusNotFound},
		{"remove one", "DELETE", path + "/three", nil, ro, 0},
		{"set again", "PUT", path, map[string]any{"labels": []string{"a", "b"}}, append(ro, "custom:a", "custom:b"), 0},
		{"clear", "DELETE", path, nil, ro, 0},
		{"unknown runner", "GET", "repos/acme/app/actions/runners/999999/labels", nil, nil, http.StatusNotFound},
	}
	for _, st := range steps { // sequential: each step builds on the previous one
		got, err := call(t.Context(), st.method, st.path, st.body)
		if st.wantStatus != 0 {
			if statusOf(err) != st.wantStatus {
				t.Errorf("%s: err = %v, want status %d", st.name, err, st.wantStatus)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: labels (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestRunnerGroups(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh := tokenClient(t, base, fake.PAT())
	ctx := t.Context()

	gs, _, err := gh.Actions.ListOrganizationRunnerGroups(ctx, "acme", nil)
	if err != nil {
		t.Fatal(err)
	}
	if gs.TotalCount != 1 || gs.RunnerGroups[0].GetID() != 1 || gs.RunnerGroups[0].GetName() != "Default" || !gs.RunnerGroups[0].GetDefault() {
		t.Fatalf("groups = %s, want only Default with id 1", github.Stringify(gs))
	}
	g, _, err := gh.Actions.CreateOrganizationRunnerGroup(ctx, "acme", github.CreateRunnerGroupRequest{
		Name: github.String("pools"), Visibility: github.String("all"), AllowsPublicRepositories: github.Bool(false),
	})
	if err != nil {
		t.Fatalf("creating group: %v", err)
	}
	if g.GetID() <= 1 || g.GetName() != "pools" || g.GetDefault() {
		t.Errorf("created group = %s", github.Stringify(g))
	}
	bad := []struct {
		name string
		req  github.CreateRunnerGroupRequest
		want int
	}{
		{"duplicate", github.CreateRunnerGroupRequest{Name: github.String("POOLS")}, http.StatusConflict},
		{"no name", github.CreateRunnerGroupRequest{}, http.StatusUnprocessableEntity},
		{"bad visibility", github.CreateRunnerGroupRequest{Name: github.String("x"), Visibility: github.String("public")}, http.StatusUnprocessableEntity},
		{"unknown runner", github.CreateRunnerGroupRequest{Name: github.String("y"), Runners: []int64{424242}}, http.StatusUnprocessableEntity},
	}
	for _, tt := range bad {
		if _, _, err := gh.Actions.CreateOrganizationRunnerGroup(ctx, "acme", tt.req); statusOf(err) != tt.want {
			t.Errorf("%s: err = %v, want %d", tt.name, err, tt.want)
		}
	}
	cfg, _, err := gh.Actions.GenerateOrgJITConfig(ctx, "acme", &github.GenerateJITConfigRequest{Name: "grouped", RunnerGroupID: g.GetID(), Labels: []string{"x"}})
	if err != nil {
		t.Fatalf("JIT runner in the new group: %v", err)
	}
	rs, _, err := gh.Actions.ListRunnerGroupRunners(ctx, "acme", g.GetID(), nil)
	if err != nil || rs.TotalCount != 1 || rs.Runners[0].GetID() != cfg.GetRunner().GetID() {
		t.Errorf("ListRunnerGroupRunners = %s, %v; want the grouped runner", github.Stringify(rs), err)
	}
	if got := fake.Runners("acme", ""); len(got) != 1 || got[0].RunnerGroupID != g.GetID() {
		t.Errorf("Runners(acme) = %+v, want one runner in group %d", got, g.GetID())
	}
	if _, err := gh.Actions.DeleteOrganizationRunnerGroup(ctx, "acme", 1); statusOf(err) != http.StatusUnprocessableEntity {
		t.Errorf("deleting Default: %v, want 422", err)
	}
	if _, err := gh.Actions.DeleteOrganizationRunnerGroup(ctx, "acme", g.GetID()); err != nil {
		t.Errorf("deleting group: %v", err)
	}
	if got := fake.Runners("acme", ""); got[0].RunnerGroupID != 1 {
		t.Errorf("runner of a deleted group is in group %d, want Default (1)", got[0].RunnerGroupID)
	}
}

func TestCancelWorkflowRun(t *testing.T) {
	t.Parallel()
	var clk clock
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	gh := tokenClient(t, base, fake.PAT())
	queued := fake.QueueJob("acme", "app", 77, []string{"self-hosted"})
	other := fake.QueueJob("acme", "app", 78, []string{"self-hosted"})

	_, err := gh.Actions.CancelWorkflowRunByID(t.Context(), "acme", "app", 77)
	// GitHub answers 202, which go-github reports as *AcceptedError: callers must treat it as success.
	var accepted *github.AcceptedError
	if !errors.As(err, &accepted) {
		t.Fatalf("CancelWorkflowRunByID: err = %v, want *github.AcceptedError", err)
	}
	want := []githubfake.CancelledRun{{Owner: "acme", Repo: "app", RunID: 77, At: t0}}
	if diff := cmp.Diff(want, fake.CancelledRuns()); diff != "" {
		t.Errorf("CancelledRuns (-want +got):\n%s", diff)
	}
	if j, _ := fake.Job(queued); j.Status != githubfake.JobCompleted || j.Conclusion != "cancelled" {
		t.Errorf("job of the cancelled run: %+v, want completed/cancelled", j)
	}
	if j, _ := fake.Job(other); j.Status != githubfake.JobQueued {
		t.Errorf("job of another run: %+v, want still queued", j)
	}
	wj, _, err := gh.Actions.GetWorkflowJobByID(t.Context(), "acme", "app", queued)
	if err != nil || wj.GetConclusion() != "cancelled" || wj.GetRunID() != 77 {
		t.Errorf("GetWorkflowJobByID = %s, %v; want the cancelled job", github.Stringify(wj), err)
	}
}
