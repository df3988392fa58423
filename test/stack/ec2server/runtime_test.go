// runtime_test.go: the instance runtime hook and the per-instance IMDSv2 endpoint, read with
// the SDK's imds client from inside a runtime; ExecRuntime with a helper child process.
package ec2server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

type runtimeEvent struct {
	kind string // "start" or "stop"
	inst RuntimeInstance
	seen map[string]string // what the runtime read from IMDS (start only)
	err  error
}

// readIMDS reads what an agent would, with the SDK's IMDS client (IMDSv2 tokens included).
func readIMDS(ctx context.Context, endpoint string) (map[string]string, error) {
	c := imds.New(imds.Options{Endpoint: endpoint})
	seen := map[string]string{}
	for _, path := range []string{"instance-id", "instance-type", "ami-id", "placement/availability-zone", "placement/region",
		"local-ipv4", "instance-life-cycle", "tags/instance", "tags/instance/pool"} {
		out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
		if err != nil {
			return nil, fmt.Errorf("GetMetadata %s: %w", path, err)
		}
		b, _ := io.ReadAll(out.Content)
		out.Content.Close()
		seen[path] = string(b)
	}
	ud, err := c.GetUserData(ctx, &imds.GetUserDataInput{})
	if err != nil {
		return nil, fmt.Errorf("GetUserData: %w", err)
	}
	b, _ := io.ReadAll(ud.Content)
	ud.Content.Close()
	seen["user-data"] = string(b)
	doc, err := c.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		return nil, fmt.Errorf("GetInstanceIdentityDocument: %w", err)
	}
	seen["document"] = doc.InstanceID + " " + doc.Region + " " + doc.AvailabilityZone + " " + doc.InstanceType + " " + doc.AccountID
	return seen, nil
}

func TestRuntimeAndIMDS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	events := make(chan runtimeEvent, 16)
	s, c, _ := newTestServer(t, Options{Runtime: func(rctx context.Context, inst RuntimeInstance) {
		seen, err := readIMDS(rctx, inst.IMDSEndpoint)
		events <- runtimeEvent{kind: "start", inst: inst, seen: seen, err: err}
		<-rctx.Done()
		events <- runtimeEvent{kind: "stop", inst: inst}
	}})
	next := func(kind string) runtimeEvent {
		t.Helper()
		select {
		case ev := <-events:
			if ev.kind != kind {
				t.Fatalf("runtime event %q, want %q", ev.kind, kind)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatalf("no runtime %q event", kind)
		}
		panic("unreachable")
	}

	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeT3Micro,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), SubnetId: aws.String("subnet-x"),
		UserData:          aws.String(base64.StdEncoding.EncodeToString([]byte("echo agent"))),
		TagSpecifications: instanceTags("pool", "linux"),
		MetadataOptions: &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired,
			InstanceMetadataTags: types.InstanceMetadataTagsStateEnabled},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)

	// No reads happen here: the ticker alone must bring the instance to running.
	ev := next("start")
	if ev.err != nil {
		t.Fatalf("runtime IMDS reads: %v", ev.err)
	}
	v, _ := s.Instance(id)
	want := map[string]string{
		"instance-id": id, "instance-type": "t3.micro", "ami-id": "ami-0123456789abcdef0",
		"placement/availability-zone": v.AvailabilityZone, "placement/region": "us-east-1", "local-ipv4": v.PrivateIP,
		"instance-life-cycle": "on-demand", "tags/instance": "pool", "tags/instance/pool": "linux", "user-data": "echo agent",
		"document": id + " us-east-1 " + v.AvailabilityZone + " t3.micro " + accountID,
	}
	for k, w := range want {
		if ev.seen[k] != w {
			t.Errorf("IMDS %s = %q, want %q", k, ev.seen[k], w)
		}
	}
	if ev.inst.ID != id || ev.inst.UserData != "echo agent" || ev.inst.Tags["pool"] != "linux" || ev.inst.IMDSEndpoint != v.IMDSEndpoint {
		t.Errorf("RuntimeInstance = %+v, view = %+v", ev.inst, v)
	}

	// IMDSv2 only: a GET without a token is refused, and a token needs a valid TTL.
	imdsTests := []struct {
		name, method, path string
		header             map[string]string
		want               int
	}{
		{"GET without token", http.MethodGet, "/latest/meta-data/instance-id", nil, http.StatusUnauthorized},
		{"GET with a bogus token", http.MethodGet, "/latest/meta-data/instance-id", map[string]string{imdsTokenHeader: "nope"}, http.StatusUnauthorized},
		{"token without TTL", http.MethodPut, "/latest/api/token", nil, http.StatusBadRequest},
		{"token TTL too long", http.MethodPut, "/latest/api/token", map[string]string{imdsTokenTTLHeader: "21601"}, http.StatusBadRequest},
		{"token by GET", http.MethodGet, "/latest/api/token", map[string]string{imdsTokenTTLHeader: "60"}, http.StatusMethodNotAllowed},
		{"token", http.MethodPut, "/latest/api/token", map[string]string{imdsTokenTTLHeader: "60"}, http.StatusOK},
	}
	for _, tt := range imdsTests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, tt.method, v.IMDSEndpoint+tt.path, nil)
			for k, val := range tt.header {
				req.Header.Set(k, val)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}

	// Stop ends the runtime; start runs a new one on the same endpoint.
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	next("stop")
	stopped := ec2.NewInstanceStoppedWaiter(c, func(o *ec2.InstanceStoppedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 50*time.Millisecond
	})
	if err := stopped.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if ev := next("start"); ev.err != nil || ev.inst.IMDSEndpoint != v.IMDSEndpoint {
		t.Errorf("second start: err %v, endpoint %s (was %s)", ev.err, ev.inst.IMDSEndpoint, v.IMDSEndpoint)
	}

	// Terminate ends the runtime and closes the endpoint.
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	next("stop")
	if v, _ := s.Instance(id); v.IMDSEndpoint != "" {
		t.Errorf("IMDS endpoint still open after terminate: %s", v.IMDSEndpoint)
	}
	if _, err := http.Get(v.IMDSEndpoint + "/latest/meta-data/"); err == nil {
		t.Error("IMDS listener still accepts connections after terminate")
	}
}

func TestIMDSTagsNeedMetadataTagsEnabled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	got := make(chan error, 1)
	_, c, _ := newTestServer(t, Options{Runtime: func(rctx context.Context, inst RuntimeInstance) {
		_, err := imds.New(imds.Options{Endpoint: inst.IMDSEndpoint}).GetMetadata(rctx, &imds.GetMetadataInput{Path: "tags/instance"})
		got <- err
	}})
	runOne(t, ctx, c, nil)
	select {
	case err := <-got:
		if err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("tags/instance without InstanceMetadataTags: err = %v, want a 404", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("runtime did not run")
	}
}

func TestCloseCancelsRuntimes(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	s, c, _ := newTestServer(t, Options{Runtime: func(rctx context.Context, inst RuntimeInstance) {
		<-rctx.Done()
		close(done)
	}})
	id := aws.ToString(runOne(t, t.Context(), c, nil).InstanceId)
	waitRunning(t, t.Context(), c, id)
	s.Close()
	select {
	case <-done:
	default:
		t.Fatal("Close returned before the runtime ended")
	}
}

// TestHelperProcess is the child that TestExecRuntime runs; it does nothing in a normal run.
// As a child it reads its instance id through IMDS, records it, and waits for SIGTERM.
func TestHelperProcess(t *testing.T) {
	args := os.Args
	i := slices.Index(args, "--")
	if i < 0 || i+1 >= len(args) {
		return
	}
	dir := args[i+1]
	ctx := context.Background()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	c := imds.New(imds.Options{Endpoint: os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")})
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "imds:", err)
		os.Exit(3)
	}
	b, _ := io.ReadAll(out.Content)
	id := os.Getenv("INSTANCE_ID")
	line := fmt.Sprintf("%s %s %s\n", id, b, os.Getenv("RUNNERPOOL_IMDS_ENDPOINT"))
	appendFile(filepath.Join(dir, id), "started "+line)
	fmt.Println("helper started")
	<-sigs
	appendFile(filepath.Join(dir, id), "sigterm\n")
	os.Exit(0)
}

func appendFile(path, s string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	_, _ = f.WriteString(s)
}

func TestExecRuntime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	s, c, _ := newTestServer(t, Options{Runtime: ExecRuntime(os.Args[0], "-test.run=^TestHelperProcess$", "--", dir)})
	id := aws.ToString(runOne(t, ctx, c, nil).InstanceId)
	v := func() InstanceView { v, _ := s.Instance(id); return v }
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, id))
			if cond(string(b)) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b, _ := os.ReadFile(filepath.Join(dir, id))
		t.Fatalf("child never %s; its record: %q", what, b)
	}
	waitFor("started", func(s string) bool { return strings.Count(s, "started") == 1 })
	b, _ := os.ReadFile(filepath.Join(dir, id))
	if want := "started " + id + " " + id + " " + v().IMDSEndpoint + "\n"; string(b) != want {
		t.Errorf("child record = %q, want %q", b, want)
	}

	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitFor("got SIGTERM on stop", func(s string) bool { return strings.HasSuffix(s, "sigterm\n") })
	stopped := ec2.NewInstanceStoppedWaiter(c, func(o *ec2.InstanceStoppedWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 50*time.Millisecond
	})
	if err := stopped.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitFor("restarted", func(s string) bool { return strings.Count(s, "started") == 2 })
}

// TestIMDSTransport: the in-process way to an instance's IMDS answers as its listener does (IMDSv2
// token, instance id), passes other hosts to its base, and refuses once the IMDS is closed.
func TestIMDSTransport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoints := make(chan string, 1)
	s, c, _ := newTestServer(t, Options{Runtime: func(rctx context.Context, inst RuntimeInstance) {
		endpoints <- inst.IMDSEndpoint
	}})
	id := aws.ToString(runOne(t, ctx, c, nil).InstanceId)
	var endpoint string
	select {
	case endpoint = <-endpoints:
	case <-time.After(5 * time.Second):
		t.Fatal("runtime did not run")
	}
	otherHost := false
	tr := s.IMDSTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		otherHost = true
		return nil, errors.New("base reached")
	}))
	cl := imds.New(imds.Options{Endpoint: endpoint, HTTPClient: &http.Client{Transport: tr}})
	out, err := cl.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		t.Fatalf("instance-id through the transport: %v", err)
	}
	b, _ := io.ReadAll(out.Content)
	if string(b) != id {
		t.Errorf("instance-id = %q, want %s", b, id)
	}
	if otherHost {
		t.Error("an IMDS request went to the base transport")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/other", nil)
	if _, err := tr.RoundTrip(req); err == nil || !otherHost {
		t.Errorf("another host: err %v, base reached %v; want the base transport's answer", err, otherHost)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	s.Close() // closes every IMDS
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/latest/meta-data/instance-id", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after its IMDS closed: %v, want connection refused", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
