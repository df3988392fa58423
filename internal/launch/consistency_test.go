package launch_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// failFirst is a record store whose first write fails.
type failFirst struct {
	mu      sync.Mutex
	calls   int
	written []string
}

func (s *failFirst) Create(_ context.Context, in store.Instance) (store.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls == 1 {
		return store.Instance{}, errors.New("throttled")
	}
	s.written = append(s.written, in.ID)
	return in, nil
}

// TestLaunchOfInstancesEC2DoesNotShowYet runs the real fleet against the EC2 server with its
// ConsistencyDelay on, so every TerminateInstances of the launch's own instances answers NotFound,
// which EC2 says does not mean they are terminated. No instance is forgotten: a partial fleet's
// instances, which the fleet could not terminate, are recorded for the caller to end; an instance
// whose record write failed is reported not terminated (Ended.Err), and it carries the deployment
// tag the orphan sweep finds it by (refresh's TestRefreshSweepNeverForgetsAnUnseenInstance).
func TestLaunchOfInstancesEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, ShuttingDownDelay: -1, ConsistencyDelay: time.Hour})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	srv.SetSubnet("subnet-a", "us-east-1a")
	c := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	lt, err := c.CreateLaunchTemplate(t.Context(), &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-0123456789abcdef0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	order := func(n int) launch.Order {
		return launch.Order{Count: n, RunnerClass: "c", Reservation: "r",
			Shape: launch.Shape{UsageClass: fleet.OnDemand, InstanceTypes: []string{"c6i.large"}, Spec: fleet.LaunchSpec{
				LaunchTemplateID: aws.ToString(lt.LaunchTemplate.LaunchTemplateId), LaunchTemplateVersion: "1",
				Subnets: []string{"subnet-a"}, Tags: map[string]string{tags.Deployment: "dep-1"},
			}},
			Record: func(_ int, l fleet.Launched) store.Instance {
				return store.Instance{ID: l.ID, State: store.StateCreated}
			},
		}
	}
	running := func() []string {
		var ids []string
		for _, v := range srv.Instances() {
			if v.State == "running" || v.State == "pending" {
				ids = append(ids, v.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}

	t.Run("partial fleet", func(t *testing.T) {
		srv.SetCapacity("c6i.large", "us-east-1a", 2)
		st := &failFirst{calls: 1} // every write succeeds
		l := launch.New(launch.Config{Fleet: fleet.New(c, fleet.Options{Logger: quiet}), Store: st, EC2: c, Logger: quiet})
		out, err := l.Launch(t.Context(), order(3))
		if !fleet.IsInsufficientCapacity(err) {
			t.Fatalf("Launch = %v, want insufficient capacity", err)
		}
		slices.Sort(st.written)
		if len(out.Ended) != 0 || len(out.Recorded) != 2 || !slices.Equal(st.written, running()) {
			t.Errorf("outcome %+v, records %v, running %v: want the 2 running instances recorded, none ended", out, st.written, running())
		}
		srv.SetCapacity("c6i.large", "us-east-1a", -1)
	})

	t.Run("record not written", func(t *testing.T) {
		before := running()
		st := &failFirst{}
		l := launch.New(launch.Config{Fleet: fleet.New(c, fleet.Options{Logger: quiet}), Store: st, EC2: c, Logger: quiet})
		out, err := l.Launch(t.Context(), order(2))
		if !errors.Is(err, launch.ErrNotRecorded) || len(out.Ended) != 1 || len(out.Recorded) != 1 {
			t.Fatalf("Launch = %+v, %v; want one recorded, one ended with ErrNotRecorded", out, err)
		}
		ended := out.Ended[0]
		if !terminate.Gone(ended.Err) || strings.Contains(err.Error(), "(terminated)") {
			t.Errorf("ended %+v, error %q: want the NotFound kept and no claim it was terminated", ended, err)
		}
		v, _ := srv.Instance(ended.InstanceID)
		if v.State != "running" || v.Tags[tags.Deployment] != "dep-1" || slices.Contains(before, ended.InstanceID) {
			t.Errorf("unrecorded %s: %s, tags %v; want running with the deployment tag (the orphan sweep's to end)", ended.InstanceID, v.State, v.Tags)
		}
	})
}
