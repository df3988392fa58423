// control.go: how the agent's server asks the control plane for a run's scope and for presigned
// URLs. The instance role has no bucket access; the reconciler presigns each S3 request
// (authority.go) for the run its own record says the instance serves. The agent proves it is the
// instance's agent the way its reports do (store/attribution.go): it signs each request with the
// Ed25519 key whose public half the control plane pinned in the instance record, over the instance,
// the run, the time and the request, so no signature serves another instance, run, object or size,
// and a job that reached the instance role (but not root, which holds the key) can ask nothing.
//
// The request is POST PathPresign with a JSON SignedRequest; the answer is an Answer (200), or
// 403 (outside the run's scope, not the instance's agent, no run) or 400.
package cache

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PathPresign is the control plane's endpoint for the agent's server (reconciler/api).
const PathPresign = "/v1/cache/presign"

// OpScope asks for the run's scope instead of a URL.
const OpScope Op = "scope"

// MaxSkew is how far a request's time may be from the control plane's clock.
const MaxSkew = 5 * time.Minute

// SignedRequest is one request of an instance's agent to the control plane.
type SignedRequest struct {
	Instance string `json:"instance"`
	Run      string `json:"run"` // the run the agent's runner serves (the record's run key)
	At       int64  `json:"at"`  // unix milliseconds
	Op       Op     `json:"op"`
	Object   string `json:"object,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Sig      string `json:"sig"`
}

func (r SignedRequest) message() []byte {
	return []byte(strings.Join([]string{"runnerpool-cache-v1", r.Instance, r.Run, strconv.FormatInt(r.At, 10),
		string(r.Op), r.Object, strconv.FormatInt(r.Size, 10)}, "\n"))
}

// Sign sets At and Sig.
func (r *SignedRequest) Sign(key ed25519.PrivateKey, at time.Time) {
	r.At = at.UnixMilli()
	r.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, r.message()))
}

// Verify reports whether the request is signed by pub (base64, as the record pins it) within
// MaxSkew of now.
func (r SignedRequest) Verify(pub string, now time.Time) bool {
	k, err := base64.StdEncoding.DecodeString(pub)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(r.Sig)
	if err != nil {
		return false
	}
	if d := now.Sub(time.UnixMilli(r.At)); d > MaxSkew || d < -MaxSkew {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(k), r.message(), sig)
}

// Answer is the control plane's answer: the scope (OpScope) or a presigned URL.
type Answer struct {
	Scope *Scope `json:"scope,omitempty"`
	URL   string `json:"url,omitempty"`
}

// Control is the agent's client of the control plane's presign endpoint.
type Control struct {
	URL      string // the reconciler's base URL
	Instance string
	Key      ed25519.PrivateKey
	HTTP     *http.Client // default: one with a 5 s timeout, so a control plane that does not answer is a fallback within seconds
	Now      func() time.Time
}

// ErrUnavailable is a control plane that did not answer (the server then forwards to GitHub).
var ErrUnavailable = errors.New("the control plane did not answer")

func (c Control) ask(ctx context.Context, run string, op Op, object string, size int64) (Answer, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	req := SignedRequest{Instance: c.Instance, Run: run, Op: op, Object: object, Size: size}
	req.Sign(c.Key, now())
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+PathPresign, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("asking the control plane: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hr)
	if err != nil {
		return Answer{}, fmt.Errorf("asking the control plane for %s: %w: %w", op, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusForbidden:
		return Answer{}, fmt.Errorf("control plane refused %s %.80q: %s: %w", op, object, bytes.TrimSpace(b), ErrDenied)
	case resp.StatusCode != http.StatusOK:
		return Answer{}, fmt.Errorf("control plane answered %s to %s: %s: %w", resp.Status, op, bytes.TrimSpace(b), ErrUnavailable)
	}
	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		return Answer{}, fmt.Errorf("control plane's answer to %s: %w", op, err)
	}
	return a, nil
}

// Scope asks for the scope of run.
func (c Control) Scope(ctx context.Context, run string) (Scope, error) {
	a, err := c.ask(ctx, run, OpScope, "", 0)
	if err != nil {
		return Scope{}, err
	}
	if a.Scope == nil {
		return Scope{}, fmt.Errorf("control plane answered no scope: %w", ErrInvalid)
	}
	return *a.Scope, nil
}

// Presign asks for a URL for req in run's scope.
func (c Control) Presign(ctx context.Context, run string, req Request) (string, error) {
	a, err := c.ask(ctx, run, req.Op, req.Object, req.Size)
	if err != nil {
		return "", err
	}
	if a.URL == "" && req.Op != OpUse { // a use is recorded, not presigned (uses.go)
		return "", fmt.Errorf("control plane answered no URL: %w", ErrInvalid)
	}
	return a.URL, nil
}

// ReportPrefix starts the detail of the agent's release signal that carries the server's counters
// for the run (the agent's existing report to the control plane, signed: store.SignalReleased).
const ReportPrefix = "cache "

// Report renders counters as the release signal's detail.
func (s Stats) Report() string {
	return fmt.Sprintf("%slocal_hits=%d remote_hits=%d misses=%d bytes_served=%d bytes_saved=%d remote_errors=%d",
		ReportPrefix, s.LocalHits, s.RemoteHits, s.Misses, s.BytesServed, s.BytesSaved, s.RemoteErrors)
}

// Sub is s minus an earlier reading.
func (s Stats) Sub(o Stats) Stats {
	return Stats{LocalHits: s.LocalHits - o.LocalHits, RemoteHits: s.RemoteHits - o.RemoteHits, Misses: s.Misses - o.Misses,
		BytesServed: s.BytesServed - o.BytesServed, BytesSaved: s.BytesSaved - o.BytesSaved, RemoteErrors: s.RemoteErrors - o.RemoteErrors}
}

// ParseReport reads a release signal's detail written by Report (ok false: none, or malformed).
// Negative or absurd counts are refused: the detail is the agent's word, signed, but checked.
func ParseReport(detail string) (Stats, bool) {
	rest, ok := strings.CutPrefix(detail, ReportPrefix)
	if !ok {
		return Stats{}, false
	}
	var s Stats
	fields := map[string]*int64{"local_hits": &s.LocalHits, "remote_hits": &s.RemoteHits, "misses": &s.Misses,
		"bytes_served": &s.BytesServed, "bytes_saved": &s.BytesSaved, "remote_errors": &s.RemoteErrors}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		dst := fields[k]
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || dst == nil || err != nil || n < 0 || n > 1<<50 {
			return Stats{}, false
		}
		*dst = n
	}
	return s, true
}
