package fleet

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// firstFleetLost sends the first CreateFleet to EC2, which applies it, and loses its answer: with
// late set, the answer is held until the caller's context ends (a launch that outlives its caller);
// otherwise EC2's answer is replaced by a 500. Later calls pass.
type firstFleetLost struct {
	late bool
	seen atomic.Bool
}

func (l *firstFleetLost) RoundTrip(r *http.Request) (*http.Response, error) {
	raw, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if !strings.Contains(string(raw), "Action=CreateFleet") || l.seen.Swap(true) {
		return http.DefaultTransport.RoundTrip(r)
	}
	resp, err := http.DefaultTransport.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	if l.late {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	const body = `<Response><Errors><Error><Code>InternalError</Code><Message>lost</Message></Error></Errors><RequestID>x</RequestID></Response>`
	return &http.Response{StatusCode: 500, Status: "500 Internal Server Error", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/xml"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

// clientOver is the env's EC2 client over transport rt, without the SDK's retries.
func (e *env) clientOver(rt http.RoundTripper) *ec2.Client {
	return ec2.New(e.client.Options(), func(o *ec2.Options) {
		o.HTTPClient = &http.Client{Transport: rt}
		o.RetryMaxAttempts = 1
	})
}

// TestLaunchThatOutlivesItsCaller: EC2 accepts a CreateFleet whose caller's deadline passes before
// the answer arrives. The fleet asks again with the client token, learns what was launched and
// terminates it: nothing is left to the orphan sweep, and the error says what happened.
func TestLaunchThatOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := New(e.clientOver(&firstFleetLost{late: true}), Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req := Request{Count: 2, UsageClass: OnDemand, InstanceTypes: []string{"c6i.*"}, MinCPU: 2, Spec: e.spec, ClientToken: "run-late"}
	_, err := f.Create(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "after the caller gave up, terminated") {
		t.Fatalf("Create past its deadline = %v, want the launched instances terminated", err)
	}
	if r := e.running(); len(r) != 0 {
		t.Errorf("%d instances left running by a launch that outlived its caller: %v", len(r), r)
	}
	if n := len(e.srv.Instances()); n != 2 {
		t.Errorf("%d instances launched, want the fleet's 2 (asking again must not launch twice)", n)
	}
}

// TestLostFleetAnswerAskedAgain: EC2 applies a CreateFleet and answers 500 (its answer lost), with no
// retries left. The fleet asks again with the client token, and EC2's answer is the first call's
// fleet: the caller gets its instances, and nothing is launched twice.
func TestLostFleetAnswerAskedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := New(e.clientOver(&firstFleetLost{}), Options{Logger: slog.New(slog.DiscardHandler)})
	req := Request{Count: 2, UsageClass: OnDemand, InstanceTypes: []string{"c6i.*"}, MinCPU: 2, Spec: e.spec, ClientToken: "run-lost"}
	got, err := f.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create after a lost answer: %v", err)
	}
	if len(got) != 2 || len(e.running()) != 2 || len(e.srv.Instances()) != 2 {
		t.Errorf("got %d, %d running, %d launched; want the one fleet of 2", len(got), len(e.running()), len(e.srv.Instances()))
	}
}
