// Tests of batched termination through the real EC2 client against the in-repo EC2 server.
package terminate_test

import (
	"errors"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// unknown is a well-formed id EC2 does not know (long terminated).
const unknown = "i-0123456789abcdef0"

func TestBatches(t *testing.T) {
	t.Parallel()
	type fault struct{ code string }
	cases := []struct {
		name  string
		size  int
		fault *fault // injected into the first call
		ids   func(live []string) []string
		want  func(live []string) terminate.Result // Errs compared by count only
		nErrs int
	}{
		{
			name: "all live, in batches", size: 2,
			ids:  func(l []string) []string { return l },
			want: func(l []string) terminate.Result { return terminate.Result{Done: l, Calls: 2} },
		},
		{
			name: "a named unknown id is dropped and its batch retried", size: 10,
			ids: func(l []string) []string { return []string{l[0], unknown, l[1], l[2]} },
			want: func(l []string) terminate.Result {
				return terminate.Result{Done: l, Gone: []string{unknown}, Calls: 2}
			},
		},
		{
			name: "a malformed id is dropped", size: 10,
			ids: func(l []string) []string { return append([]string{"bogus"}, l...) },
			want: func(l []string) terminate.Result {
				return terminate.Result{Done: l, Gone: []string{"bogus"}, Calls: 2}
			},
		},
		{
			name: "an unknown id not named: one by one", size: 10, fault: &fault{"InvalidInstanceID.NotFound"},
			ids:  func(l []string) []string { return l },
			want: func(l []string) terminate.Result { return terminate.Result{Done: l, Calls: 1 + 3} },
		},
		{
			name: "any other error fails the batch, not the next", size: 2, fault: &fault{"UnauthorizedOperation"},
			ids: func(l []string) []string { return l },
			want: func(l []string) terminate.Result {
				return terminate.Result{Done: l[2:], Failed: l[:2], Calls: 2}
			},
			nErrs: 1,
		},
		{
			name: "size below 1 means one per call", size: 0,
			ids:  func(l []string) []string { return l[:2] },
			want: func(l []string) terminate.Result { return terminate.Result{Done: l[:2], Calls: 2} },
		},
		{
			name: "nothing to do", size: 50,
			ids:  func([]string) []string { return nil },
			want: func([]string) terminate.Result { return terminate.Result{} },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, c := newEC2(t)
			live := launch(t, c, 3)
			if tc.fault != nil {
				srv.SetFailNext("TerminateInstances", tc.fault.code, 0)
			}
			got := terminate.Batches(t.Context(), c, tc.ids(live), tc.size)
			if len(got.Errs) != tc.nErrs {
				t.Errorf("errors = %v, want %d", got.Errs, tc.nErrs)
			}
			got.Errs = nil
			if diff := cmp.Diff(tc.want(live), got); diff != "" {
				t.Errorf("Batches (-want +got):\n%s", diff)
			}
			for _, id := range got.Done {
				if v, _ := srv.Instance(id); v.State != "shutting-down" && v.State != "terminated" {
					t.Errorf("%s is %s after Batches, want terminated", id, v.State)
				}
			}
			for _, id := range got.Failed {
				if v, _ := srv.Instance(id); v.State != "running" {
					t.Errorf("failed %s is %s, want left running", id, v.State)
				}
			}
		})
	}
}

func TestGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound"}, true},
		{&smithy.GenericAPIError{Code: "InvalidInstanceID.Malformed"}, true},
		{&smithy.GenericAPIError{Code: "RequestLimitExceeded"}, false},
		{&smithy.GenericAPIError{Code: "UnauthorizedOperation"}, false},
		{errors.New("InvalidInstanceID.NotFound"), false}, // not an API error: a message proves nothing
		{nil, false},
	} {
		if got := terminate.Gone(tc.err); got != tc.want {
			t.Errorf("Gone(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func newEC2(t *testing.T) (*ec2server.Server, *ec2.Client) {
	t.Helper()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	c := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(hs.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	return srv, c
}

func launch(t *testing.T, c *ec2.Client, n int) []string {
	t.Helper()
	out, err := c.RunInstances(t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ids []string
	for _, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	slices.Sort(ids)
	return ids
}
