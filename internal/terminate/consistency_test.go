// A termination of instances EC2 does not show yet (the EC2 server's ConsistencyDelay).
package terminate_test

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// TestProvenSparesWhatEC2DoesNotShowYet: a batch naming an instance launched a moment ago that
// EC2 does not show yet answers NotFound for it, as for an id EC2 forgot long ago; Batches reports
// both Gone and terminates the rest. Proven takes only the old id as gone: the new instance runs.
func TestProvenSparesWhatEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	srv := ec2server.New(ec2server.Options{Now: clock, PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1,
		ConsistencyDelay: time.Minute})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	c := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})

	launchedAt := map[string]time.Time{unknown: now.Add(-time.Hour)} // its record is an hour old
	old := launch(t, c, 2)
	for _, id := range old {
		launchedAt[id] = clock()
	}
	advance(10 * time.Minute)
	fresh := launch(t, c, 1)[0]
	launchedAt[fresh] = clock()

	res := terminate.Batches(t.Context(), c, []string{old[0], fresh, unknown, old[1]}, 10)
	if diff := cmp.Diff(old, res.Done); diff != "" {
		t.Errorf("Done (-want +got):\n%s", diff)
	}
	gone, unseen := res.Proven(func(id string) time.Time { return launchedAt[id] }, clock())
	if diff := cmp.Diff([]string{unknown}, gone); diff != "" {
		t.Errorf("proven gone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{fresh}, unseen); diff != "" {
		t.Errorf("unseen (-want +got):\n%s", diff)
	}
	if v, _ := srv.Instance(fresh); v.State != "running" {
		t.Fatalf("%s is %s, want running: EC2's NotFound did not terminate it", fresh, v.State)
	}

	// Asked again once EC2 shows it, it is terminated; past the window an unknown id is gone.
	srv.MakeVisible(fresh)
	again := terminate.Batches(t.Context(), c, []string{fresh}, 10)
	if !cmp.Equal(again.Done, []string{fresh}) {
		t.Errorf("asked again: %+v, want %s done", again, fresh)
	}
	advance(terminate.ConsistencyWindow)
	if gone, unseen := res.Proven(func(id string) time.Time { return launchedAt[id] }, clock()); len(unseen) != 0 || len(gone) != 2 {
		t.Errorf("past the window: gone %v unseen %v, want both gone", gone, unseen)
	}
	if gone, _ := (terminate.Result{Gone: []string{"i-0aaaaaaaaaaaaaaaa"}}).Proven(func(string) time.Time { return time.Time{} }, clock()); len(gone) != 1 {
		t.Errorf("launch time unknown: gone %v, want it gone", gone)
	}
}
