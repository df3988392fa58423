// Fuzzing the payload parser and the pool label reader with arbitrary bytes: they never panic, and
// whatever they accept satisfies what routing relies on. The seed corpus (testdata/fuzz) holds
// GitHub-shaped payloads, including the edge cases found so far.
package webhook_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
)

var poolName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func FuzzParseWorkflowJob(f *testing.F) {
	f.Add(jobPayload("queued", 1, "self-hosted", "runs-on/pool=small"))
	f.Add(jobPayload("completed", 2, "dependabot"))
	f.Add([]byte(`{"action":"queued","workflow_job":{"id":1,"run_id":1,"labels":["pool=a","pool=b"]},"repository":{"full_name":"a/b"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := webhook.ParseWorkflowJob(body)
		if err != nil {
			return
		}
		owner, name, ok := strings.Cut(ev.Repository, "/")
		if ev.JobID <= 0 || ev.RunID <= 0 || ev.Action == "" || !ok || owner == "" || name == "" {
			t.Fatalf("accepted %+v", ev)
		}
		for _, l := range ev.Labels {
			if l == "" || len(l) > 256 {
				t.Fatalf("accepted label %q", l)
			}
		}
		ask, err := webhook.PoolFromLabels(ev.Labels)
		if err == nil && ask.Pool != "" && !poolName.MatchString(ask.Pool) {
			t.Fatalf("PoolFromLabels(%q) = %+v, not a pool name", ev.Labels, ask)
		}
	})
}
