package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// fakeMetadata serves metadata values from a map; a missing path is IMDS's 404.
type fakeMetadata struct {
	mu     sync.Mutex
	values map[string]string
	calls  int
}

func (f *fakeMetadata) set(path, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[path] = v
}

func (f *fakeMetadata) GetMetadata(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	v, ok := f.values[in.Path]
	if !ok {
		return nil, &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusNotFound}}, Err: errors.New("not found")}
	}
	return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(v + "\n"))}, nil
}

func TestTagNotice(t *testing.T) {
	t.Parallel()
	md := &fakeMetadata{values: map[string]string{}}
	n := NewTagNotice(md, time.Millisecond, time.Hour, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// The first look always wakes (the tag may have changed before the agent's first read); an absent
	// tag counts as the value "".
	if err := n.Wait(ctx); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	// No change: Wait keeps polling until the tag changes.
	go func() { time.Sleep(50 * time.Millisecond); md.set(TagPath, "7") }()
	if err := n.Wait(ctx); err != nil {
		t.Fatalf("Wait for change: %v", err)
	}
	if n.last != "7" {
		t.Errorf("last = %q, want 7", n.last)
	}
	md.mu.Lock()
	calls := md.calls
	md.mu.Unlock()
	if calls < 3 {
		t.Errorf("only %d metadata calls: the notice did not poll", calls)
	}
	// Unchanged until ctx ends: Wait returns ctx's error.
	short, cancelShort := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancelShort()
	if err := n.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait without a change = %v, want deadline exceeded", err)
	}
}

func TestTagNoticeFallback(t *testing.T) {
	t.Parallel()
	md := &fakeMetadata{values: map[string]string{TagPath: "1"}}
	n := NewTagNotice(md, time.Millisecond, 20*time.Millisecond, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 3 { // first look, then two fallbacks without any change
		if err := n.Wait(ctx); err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
	}
}

func TestNewNotice(t *testing.T) {
	t.Parallel()
	md := &fakeMetadata{values: map[string]string{}}
	tests := []struct {
		mode    NoticeMode
		want    string
		wantErr bool
	}{
		{NoticeIMDSTags, "*agent.TagNotice", false},
		{NoticePoll, "*agent.PollNotice", false},
		{"sqs", "", true},
	}
	for _, tt := range tests {
		n, err := NewNotice(tt.mode, md, time.Millisecond, time.Second, nil)
		if (err != nil) != tt.wantErr {
			t.Errorf("NewNotice(%q) error = %v", tt.mode, err)
			continue
		}
		if got := fmt.Sprintf("%T", n); !tt.wantErr && got != tt.want {
			t.Errorf("NewNotice(%q) = %s, want %s", tt.mode, got, tt.want)
		}
	}
}

func TestReadIdentity(t *testing.T) {
	t.Parallel()
	md := &fakeMetadata{values: map[string]string{
		"instance-id": "i-0abc", "instance-type": "c7g.large", "placement/availability-zone": "eu-west-1b",
	}}
	id, err := ReadIdentity(t.Context(), md)
	if err != nil {
		t.Fatal(err)
	}
	if id != (Identity{InstanceID: "i-0abc", InstanceType: "c7g.large", AvailabilityZone: "eu-west-1b"}) {
		t.Errorf("identity = %+v", id)
	}
	delete(md.values, "instance-type")
	if _, err := ReadIdentity(t.Context(), md); !errors.Is(err, errNoMetadata) {
		t.Errorf("missing instance-type: err = %v, want errNoMetadata", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := Config{Notice: "sqs", StateDir: "rel", WorkDir: "/", RunnerUser: "root", TempDirs: []string{"tmp"},
		RunnerManifest: "runner.sha256"}.withDefaults()
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{"store", "EC2", "metadata", "runner driver", "state directory", "work directory", "root", "tmp", "sqs",
		"runner manifest", "runner directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

func TestDockerCleanup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outputs map[string]string // command line -> output
		fail    string            // command line that fails
		want    []string
		wantErr string
	}{
		{"containers and volumes", map[string]string{"ps --all --quiet": "abc\ndef\n", "volume ls --quiet": "cache\n"}, "",
			[]string{"ps --all --quiet", "rm --force --volumes abc def", "volume ls --quiet", "volume rm --force cache", "network prune --force"}, ""},
		{"nothing left", map[string]string{}, "",
			[]string{"ps --all --quiet", "volume ls --quiet", "network prune --force"}, ""},
		{"daemon down", map[string]string{}, "ps --all --quiet", []string{"ps --all --quiet"}, "listing containers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				line := strings.Join(args, " ")
				got = append(got, line)
				if name != "/usr/bin/docker" {
					t.Errorf("ran %q", name)
				}
				if line == tt.fail {
					return []byte("Cannot connect to the Docker daemon"), errors.New("exit status 1")
				}
				return []byte(tt.outputs[line]), nil
			}
			err := dockerCleanup(t.Context(), "/usr/bin/docker", run)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("commands = %q, want %q", got, tt.want)
			}
		})
	}
}
