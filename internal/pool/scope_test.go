// Scope queues against fauxqs through the real SQS client: a message goes to its scope's queue,
// created like the class queue; a pickup reads only the queues of the scopes that cover its
// request; a class queue whose name leaves no room keeps every message.
package pool_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// scopedQueue creates a class queue of its own (visibility timeout 45 s, retention 2 days) and
// returns its pool with scope queues; every queue of it is deleted at the end.
func scopedQueue(t *testing.T) (*pool.Queue, *sqs.Client) {
	t.Helper()
	client := stacktest.Shared(t).SQS()
	out, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{
		QueueName:  aws.String(stacktest.UniqueName(t, "pool")),
		Attributes: map[string]string{"VisibilityTimeout": "45", "MessageRetentionPeriod": "172800"},
	})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		scoped, _ := pool.ListScopeQueues(context.Background(), client, url)
		for _, u := range append(scoped, url) {
			_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	return pool.NewScopedQueue(client, url, pool.ScopeOptions{Logger: quiet}), client
}

func drainURL(t *testing.T, client *sqs.Client, url string) []string {
	t.Helper()
	return drain(t, client, pool.NewQueue(client, url))
}

func TestScopedQueuePutGoesToItsScopeQueue(t *testing.T) {
	t.Parallel()
	q, client := scopedQueue(t)
	a := msg("i-0000000000000000a", func(m *pool.Message) { m.Scope = "acme/api" })
	b := msg("i-0000000000000000b", func(m *pool.Message) { m.Scope = "acme/web" })
	none := msg("i-0000000000000000c", func(m *pool.Message) { m.Scope = "" })
	put(t, q, a, b, none)

	urlA, urlB := q.URLFor("acme/api"), q.URLFor("acme/web")
	if urlA == urlB || urlA == q.URL() || q.URLFor("ACME/Api") != urlA {
		t.Fatalf("URLFor: acme/api %s, acme/web %s, class %s: want distinct scope queues, case-insensitive", urlA, urlB, q.URL())
	}
	name := urlA[strings.LastIndex(urlA, "/")+1:]
	className := q.URL()[strings.LastIndex(q.URL(), "/")+1:]
	if !strings.HasPrefix(name, className+pool.ScopeInfix) || len(name) != len(className)+len(pool.ScopeInfix)+8 || !q.IsScopeQueue(urlA) {
		t.Errorf("scope queue name %q: want %s-s-<8 hex>", name, className)
	}
	// Created like the class queue.
	attrs, err := client.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(urlA), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameMessageRetentionPeriod},
	})
	if err != nil {
		t.Fatalf("the scope queue was not created: %v", err)
	}
	if attrs.Attributes["VisibilityTimeout"] != "45" || attrs.Attributes["MessageRetentionPeriod"] != "172800" {
		t.Errorf("scope queue attributes %v, want the class queue's (45, 172800)", attrs.Attributes)
	}
	listed, err := pool.ListScopeQueues(t.Context(), client, q.URL())
	slices.Sort(listed)
	if want := []string{urlA, urlB}; err != nil || !slices.Equal(listed, slices.Sorted(slices.Values(want))) {
		t.Errorf("ListScopeQueues = %v, %v; want %s and %s", listed, err, urlA, urlB)
	}
	for _, c := range []struct {
		url  string
		want []string
	}{{urlA, encode(t, a)}, {urlB, encode(t, b)}, {q.URL(), encode(t, none)}} {
		if got := drainURL(t, client, c.url); !slices.Equal(got, c.want) {
			t.Errorf("queue %s holds %v, want %v", c.url, got, c.want)
		}
	}
}

// A pickup of repository A never receives B's messages: no misfit of another scope is in its path.
func TestScopedPickupReadsOnlyItsScopes(t *testing.T) {
	t.Parallel()
	q, client := scopedQueue(t)
	var mine, theirs []pool.Message
	for i := range 3 {
		mine = append(mine, msg("i-00000000000000a0"+string(rune('0'+i)), func(m *pool.Message) { m.Scope = "acme/api" }))
	}
	for i := range 8 {
		theirs = append(theirs, msg("i-00000000000000b0"+string(rune('0'+i)), func(m *pool.Message) { m.Scope = "acme/web" }))
	}
	put(t, q, append(theirs, mine...)...)

	p := pool.NewPickup(q, pool.Filter{Scope: "acme/api"}, pool.PickupOptions{Logger: quiet})
	var got []string
	for {
		m, err := p.Next(t.Context())
		if errors.Is(err, pool.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Scope != "acme/api" {
			t.Errorf("pickup of acme/api got %s of %s", m.InstanceID, m.Scope)
		}
		got = append(got, m.InstanceID)
		p.Claimed(t.Context(), m)
	}
	if len(got) != len(mine) {
		t.Errorf("pickup got %v, want the 3 of acme/api", got)
	}
	if st := p.Stats(); st.Matched != len(mine) || st.Misfits != 0 || st.Exhausted != pool.ExhaustedGlobal {
		t.Errorf("stats %+v: want acme/api's 3 messages matched, no misfit received", st)
	}
	if left := drainURL(t, client, q.URLFor("acme/web")); !slices.Equal(left, encode(t, theirs...)) {
		t.Errorf("acme/web's queue after the pickup: %d messages, want its 8 untouched", len(left))
	}
}

// An owner's instance serves its repositories: a repository's pickup reads the owner's queue after
// its own (which does not exist here: nothing was released into it).
func TestScopedPickupFindsTheOwnersInstance(t *testing.T) {
	t.Parallel()
	q, _ := scopedQueue(t)
	owner := msg("i-0000000000000000d", func(m *pool.Message) { m.Scope = "acme" })
	other := msg("i-0000000000000000e", func(m *pool.Message) { m.Scope = "umbrella" })
	put(t, q, owner, other)

	p := pool.NewPickup(q, pool.Filter{Scope: "acme/app"}, pool.PickupOptions{Logger: quiet})
	m, err := p.Next(t.Context())
	if err != nil || m.InstanceID != owner.InstanceID {
		t.Fatalf("Next = %s, %v; want the owner's %s", m.InstanceID, err, owner.InstanceID)
	}
	p.Claimed(t.Context(), m)
	if _, err := p.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
		t.Fatalf("second Next: %v, want ErrExhausted", err)
	}
	// One receive of the repository's missing queue, one that found the owner's message, one empty
	// asked again at once, two empty.
	if st := p.Stats(); st.Misfits != 0 || st.Receives != 5 {
		t.Errorf("stats %+v: want 5 receives and no misfit (umbrella's instance is in its own queue)", st)
	}
	// The missing queue is remembered: the next pickup does not ask for it again.
	p2 := pool.NewPickup(q, pool.Filter{Scope: "acme/app"}, pool.PickupOptions{Logger: quiet})
	if _, err := p2.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
		t.Fatalf("Next: %v, want ErrExhausted", err)
	}
	if st := p2.Stats(); st.Receives != 3 {
		t.Errorf("stats %+v: want the owner's queue's 3 empty receives only (the first asked again at once)", st)
	}
}

// A scope queue that vanished (refresh deletes one that stayed empty for a day) is created again
// by the next Put.
func TestScopedPutCreatesADeletedQueueAgain(t *testing.T) {
	t.Parallel()
	q, client := scopedQueue(t)
	a := msg("i-0000000000000000a", func(m *pool.Message) { m.Scope = "acme/api" })
	put(t, q, a)
	url := q.URLFor(a.Scope)
	if _, err := client.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	put(t, q, a)
	if got := drainURL(t, client, url); !slices.Equal(got, encode(t, a)) {
		t.Errorf("recreated scope queue holds %v, want the message", got)
	}
	if got := drain(t, client, q); len(got) != 0 {
		t.Errorf("class queue holds %v, want nothing", got)
	}
}

func TestScopeQueueNaming(t *testing.T) {
	t.Parallel()
	const base = "http://sqs.eu-west-1.localhost:4566/000000000000/"
	long := strings.Repeat("q", pool.MaxQueueName-len(pool.ScopeInfix)-8)
	for _, c := range []struct {
		name, class string
		scoped      bool
		suffix      string
	}{
		{"plain", "runnerpool-pool-linux", true, ""},
		{"fifo keeps its suffix", "runnerpool-pool-linux.fifo", true, ".fifo"},
		{"longest that fits", long, true, ""},
		{"too long: the class queue only", long + "q", false, ""},
		{"fifo too long", long + ".fifo", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := pool.NewScopedQueue(nil, base+c.class, pool.ScopeOptions{Logger: quiet})
			got := q.URLFor("acme/api")
			if q.Scoped() != c.scoped {
				t.Fatalf("Scoped() = %v, want %v", q.Scoped(), c.scoped)
			}
			if !c.scoped {
				if got != q.URL() {
					t.Errorf("URLFor = %s, want the class queue", got)
				}
				return
			}
			name := strings.TrimPrefix(got, base)
			if len(name) > pool.MaxQueueName || !strings.HasSuffix(name, c.suffix) || !q.IsScopeQueue(got) || q.IsScopeQueue(q.URL()) {
				t.Errorf("URLFor = %s (%d characters): want <= %d, suffix %q, a scope queue of %s", got, len(name), pool.MaxQueueName, c.suffix, c.class)
			}
			if q.URLFor("") != q.URL() {
				t.Errorf("a message without a scope goes to %s, want the class queue", q.URLFor(""))
			}
		})
	}
}
