// Package wake is the control plane's half of the claim notice: after a change an idle instance's
// agent must act on (a claim, a release), the control plane sets the instance tag TagKey to a new
// value. The agent watches its own tags through the instance metadata service, which is local and
// free, and re-reads its record from DynamoDB only when the tag changes. The tag carries no
// authority: the record in the table stays the only source of truth, and the value means nothing
// but "changed".
//
// Notices are batched. EC2 throttles each API on its own bucket, and CreateTags is a mutating
// action (a burst of 200 requests, then 5 a second per account and Region): one CreateTags per
// hand-over would pace a burst of claims and releases at 5 a second, seconds of delay for every
// job behind the bucket. CreateTags names up to 1,000 resources per request, all with one value,
// so Notify sends at once when no request is in flight and otherwise joins the next one: a burst
// of notices costs a few requests, and a lone notice waits for nothing.
package wake

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// TagKey is the instance tag that wakes an agent. Instance metadata tags must be enabled on the
// launch template (MetadataOptions.InstanceMetadataTags = enabled) for the agent to see it.
const TagKey = "runnerpool:wake"

// MaxBatch is the most instances one CreateTags request names (EC2 accepts up to 1,000 resource
// IDs per request).
const MaxBatch = 1000

// sendTimeout bounds one batch's CreateTags (its callers may have given up waiting meanwhile).
const sendTimeout = 30 * time.Second

// Tagger is the part of the EC2 client wake uses.
type Tagger interface {
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// batchers holds one batcher per EC2 client (Tagger), made on first use.
var batchers sync.Map

// Notify wakes the agent of instanceID and returns once the tag is set, or with the error that
// kept it from being set, or when ctx ends (the tag may still be set after that). A failed notify
// is not fatal to the caller's transition: the agent also re-reads its record on a slow fallback
// timer.
func Notify(ctx context.Context, api Tagger, instanceID string) error {
	if t := reflect.TypeOf(api); t == nil || !t.Comparable() {
		// Not usable as a key (a test double holding a map): no batching.
		return tag(ctx, api, []string{instanceID})
	}
	b, _ := batchers.LoadOrStore(api, &batcher{api: api})
	return b.(*batcher).notify(ctx, instanceID)
}

// Stats counts what the batcher of one client sent.
type Stats struct {
	Notices  int64 // Notify calls
	Requests int64 // CreateTags requests (batches, and single retries after a failed batch)
}

// StatsOf returns the counters of api's batcher (zero before its first Notify).
func StatsOf(api Tagger) Stats {
	if t := reflect.TypeOf(api); t == nil || !t.Comparable() {
		return Stats{}
	}
	b, ok := batchers.Load(api)
	if !ok {
		return Stats{}
	}
	bt := b.(*batcher)
	return Stats{Notices: bt.notices.Load(), Requests: bt.requests.Load()}
}

type waiter struct {
	id   string
	done chan error // buffered: the sender never blocks on a caller that gave up
}

// batcher sends the notices of one client: whatever arrives while a request is in flight goes in the
// next one.
type batcher struct {
	api Tagger

	mu      sync.Mutex
	pending []waiter
	running bool

	notices, requests atomic.Int64
}

func (b *batcher) notify(ctx context.Context, id string) error {
	b.notices.Add(1)
	w := waiter{id: id, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, w)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waking %s: %w", id, ctx.Err())
	}
}

// run sends batches until nothing is pending.
func (b *batcher) run() {
	for {
		b.mu.Lock()
		n := min(len(b.pending), MaxBatch)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		b.mu.Unlock()
		b.send(batch)
	}
}

func (b *batcher) send(batch []waiter) {
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	var ids []string
	for _, w := range batch {
		if !slices.Contains(ids, w.id) {
			ids = append(ids, w.id)
		}
	}
	b.requests.Add(1)
	err := tag(ctx, b.api, ids)
	if err == nil || len(ids) == 1 || !badResource(err) {
		// Throttling, a 5xx, a timeout: the request failed for every instance alike, and one
		// request per instance would only spend more of the throttled bucket within the same
		// deadline. Every caller hears the error (a claim then hands its instance back).
		for _, w := range batch {
			w.done <- err
		}
		return
	}
	// EC2 refuses the whole request for one bad resource (an instance terminated meanwhile): tag
	// the instances one by one, so the others are still woken and each caller hears its own error.
	results := map[string]error{}
	for _, id := range ids {
		b.requests.Add(1)
		results[id] = tag(ctx, b.api, []string{id})
	}
	for _, w := range batch {
		w.done <- results[w.id]
	}
}

// last is the last tag value handed out: values increase strictly within a process.
var last atomic.Int64

// nextValue returns a tag value no earlier notice of this process used (the time in nanoseconds,
// bumped past the last value): an agent sees every notice as a change.
func nextValue() string {
	for {
		prev := last.Load()
		v := max(time.Now().UnixNano(), prev+1)
		if last.CompareAndSwap(prev, v) {
			return strconv.FormatInt(v, 10)
		}
	}
}

// badResource reports whether EC2 refused a request for one of the resources it names (an
// instance that does not exist, or an id it cannot parse), rather than for the request as a whole.
func badResource(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && strings.HasPrefix(ae.ErrorCode(), "InvalidInstanceID")
}

func tag(ctx context.Context, api Tagger, ids []string) error {
	_, err := api.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: ids,
		Tags:      []types.Tag{{Key: aws.String(TagKey), Value: aws.String(nextValue())}},
	})
	if err != nil {
		if len(ids) == 1 {
			return fmt.Errorf("waking %s: %w", ids[0], err)
		}
		return fmt.Errorf("waking %d instances: %w", len(ids), err)
	}
	return nil
}
