// The benchmark's meters: the claim-notice latency seen from inside the instances, and the
// reconciler's GitHub requests.
package bench

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

type middlewareStack = middleware.Stack

// noticeMeter measures the claim notice: every record an agent reads passes through observe; the
// first read of a claimed record by an agent that last saw its instance idle (or hot) is a claim
// noticed, and its latency is the read's time minus the claim write's time (the record's
// updated_at, written with the control plane's clock; one machine here, so one clock).
type noticeMeter struct {
	mu   sync.Mutex
	last map[string]store.Instance
	lat  []float64
}

func newNoticeMeter() *noticeMeter { return &noticeMeter{last: map[string]store.Instance{}} }

func (m *noticeMeter) observe(rec store.Instance) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, seen := m.last[rec.ID]
	m.last[rec.ID] = rec
	if !seen || rec.Version <= prev.Version || rec.State != store.StateClaimed {
		return
	}
	if prev.State == store.StateIdle || prev.State == store.StateReady {
		m.lat = append(m.lat, float64(now.Sub(rec.UpdatedAt))/float64(time.Millisecond))
	}
}

func (m *noticeMeter) samples() []float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]float64(nil), m.lat...)
}

// httpCounter counts the requests to one host by method and path (ids replaced by {id}): the
// reconciler's GitHub calls. Other hosts (the OIDC issuer) pass uncounted.
type httpCounter struct {
	host   string
	base   http.RoundTripper
	mu     sync.Mutex
	counts map[string]int
}

var idSegment = regexp.MustCompile(`/[0-9]+(/|$)`)

func (c *httpCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == c.host {
		key := "GitHub." + r.Method + " " + idSegment.ReplaceAllString(r.URL.Path, "/{id}$1")
		c.mu.Lock()
		c.counts[key]++
		c.mu.Unlock()
	}
	return c.base.RoundTrip(r)
}

func (c *httpCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// batchKeys counts the keys of the reconciler's BatchGetItem requests: each is an item read as a
// GetItem is, so table reads are GetItem requests plus these keys.
type batchKeys struct {
	mu sync.Mutex
	n  int
}

func (b *batchKeys) AddMiddleware(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("runnerpool.BatchKeys", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if bg, ok := in.Parameters.(*dynamodb.BatchGetItemInput); ok {
			n := 0
			for _, ka := range bg.RequestItems {
				n += len(ka.Keys)
			}
			b.mu.Lock()
			b.n += n
			b.mu.Unlock()
		}
		return next.HandleInitialize(ctx, in)
	}), middleware.After)
}

func (b *batchKeys) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// responseBytes counts the bytes of the answers to the AWS requests made through it (their
// Content-Length): what a pass has the table serialise and the client decode. Unlike a pass's
// time or CPU it does not depend on the machine's load.
type responseBytes struct{ n atomic.Int64 }

func (b *responseBytes) AddMiddleware(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("runnerpool.ResponseBytes", func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleDeserialize(ctx, in)
		if r, ok := out.RawResponse.(*smithyhttp.Response); ok && r.ContentLength > 0 {
			b.n.Add(r.ContentLength)
		}
		return out, md, err
	}), middleware.Before)
}
