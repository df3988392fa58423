// The middleware every API route goes through, outermost first: request id, panic recovery,
// access log and metrics, time limit, body size limit. Strict JSON decoding and the JSON error
// writer live here too, so every handler answers errors in one shape: a stable code, the request
// id, a message redacted of the deployment's internals (redact.go); the error behind it goes to
// the access log as "cause".
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// reqState is what the middleware and the handler of one request share.
type reqState struct {
	id      string
	route   string
	errCode string // the code of an error answer, for the access log
	errMsg  string
	cause   error       // the error behind an error answer: logged, never answered
	attrs   []slog.Attr // added by the handler (run_id, instance ids)
	// rc clears the body read deadline once the body is read (see wrap).
	rc *http.ResponseController
}

// bodyReadTimeout bounds reading a request body. It is a per-request deadline rather than the
// server's ReadTimeout: that one would also fire during a long provision, and net/http cancels
// the request's context when it does.
const bodyReadTimeout = 30 * time.Second

type stateKey struct{}

func state(ctx context.Context) *reqState {
	if s, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return s
	}
	return &reqState{}
}

// annotate adds attributes to the request's access log line and to every log line written with
// the request's context from now on.
func annotate(r *http.Request, attrs ...slog.Attr) *http.Request {
	s := state(r.Context())
	s.attrs = append(s.attrs, attrs...)
	return r.WithContext(logging.With(r.Context(), attrs...))
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestIDRE is the X-Request-Id the API adopts: short, and nothing a log line or a header could
// be confused by.
var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID is the request's id: the caller's X-Request-Id when it is well-formed and, if trusted
// proxies are configured, the request came through one of them; otherwise a fresh one.
func (a *API) requestID(r *http.Request) string {
	vs := r.Header.Values("X-Request-Id")
	if len(vs) != 1 || !requestIDRE.MatchString(vs[0]) || !a.fromTrustedProxy(r) {
		return newRequestID()
	}
	return vs[0]
}

// fromTrustedProxy reports whether the request's peer is a trusted proxy (always, when none is
// configured).
func (a *API) fromTrustedProxy(r *http.Request) bool {
	if len(a.o.TrustedProxies) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range a.o.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// setCause records the error behind an error answer, for the access log.
func setCause(r *http.Request, err error) {
	if err != nil {
		state(r.Context()).cause = err
	}
}

// wrap applies the middleware chain to h for a named route. timeout 0 leaves the request's
// context alone (provision and release run on a context of their own, see workContext).
func (a *API) wrap(route string, timeout time.Duration, maxBody int64, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := a.now()
		rs := &reqState{id: a.requestID(r), route: route}
		ctx := context.WithValue(r.Context(), stateKey{}, rs)
		ctx = logging.With(ctx, slog.String(logging.KeyRequestID, rs.id))
		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("X-Request-Id", rs.id)

		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.metrics.Error(metrics.ErrPanic)
				a.log.ErrorContext(ctx, "panic serving request", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if sw.code == 0 {
					a.writeError(sw, r.WithContext(ctx), http.StatusInternalServerError, apiv1.CodeInternal, "internal error", true)
				}
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			d := a.now().Sub(start)
			a.metrics.HTTPRequest(route, code, d)
			attrs := []any{"method", r.Method, "path", r.URL.Path, "route", route, "status", code, "duration_ms", d.Milliseconds()}
			for _, at := range rs.attrs {
				attrs = append(attrs, at)
			}
			if rs.errCode != "" {
				attrs = append(attrs, "code", rs.errCode, "error", rs.errMsg)
			}
			if rs.cause != nil {
				attrs = append(attrs, "cause", truncate(rs.cause.Error(), 4096))
			}
			level := slog.LevelInfo
			switch {
			case code >= 500:
				level = slog.LevelError
			case code >= 400:
				level = slog.LevelWarn
			case route == "healthz" || route == "readyz" || route == "metrics":
				level = slog.LevelDebug
			}
			a.log.Log(ctx, level, "request", attrs...)
		}()

		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if maxBody > 0 {
			r.Body = http.MaxBytesReader(sw, r.Body, maxBody)
		}
		if r.ContentLength != 0 { // a body (or an unknown length) to read
			rs.rc = http.NewResponseController(sw)
			_ = rs.rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
		}
		h(sw, r.WithContext(ctx))
	})
}

// writeJSON writes v with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"encoding the response failed","code":"internal"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers an error in the API's one shape and records it for the access log.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string, retryable bool) {
	a.writeErrorBody(w, r, status, apiv1.Error{Error: msg, Code: code, Retryable: retryable})
}

func (a *API) writeErrorBody(w http.ResponseWriter, r *http.Request, status int, body apiv1.Error) {
	rs := state(r.Context())
	body.Error = redact(body.Error)
	rs.errCode, rs.errMsg = body.Code, body.Error
	body.RequestID = rs.id
	switch {
	case status == http.StatusUnauthorized:
		a.metrics.Error(metrics.ErrAuth)
		// RFC 6750: tell the client what kind of credential is expected.
		w.Header().Set("WWW-Authenticate", `Bearer realm="runnerpool", error="invalid_token"`)
	case status == http.StatusForbidden:
		a.metrics.Error(metrics.ErrForbidden)
	case status == http.StatusServiceUnavailable && (body.Code == apiv1.CodeUnavailable || body.Code == apiv1.CodeShuttingDown):
		a.metrics.Error(metrics.ErrUnavailable)
	case status >= 500 && body.Code != apiv1.CodeUnsuccessful && body.Code != apiv1.CodeDumped && body.Code != apiv1.CodeReleaseIncomplete:
		a.metrics.Error(metrics.ErrInternal)
	case status == http.StatusTooManyRequests:
		// Counted by limit (runnerpool_quota_refusals_total), not as an error.
	case status >= 400 && status < 500:
		a.metrics.Error(metrics.ErrBadRequest)
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "30")
	}
	if body.Retryable && (status == http.StatusServiceUnavailable || status == http.StatusConflict) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "2")
	}
	writeJSON(w, status, body)
}

// errDecode is a request body the API refuses; status is 400, 413 or 415.
type errDecode struct {
	status int
	code   string
	msg    string
}

func (e *errDecode) Error() string { return e.msg }

// decodeJSON decodes exactly one JSON object into v, refusing unknown fields, trailing data, other
// content types and bodies over the limit. allowEmpty treats an empty body as {}. A body needs
// Content-Type: application/json (415 without, or with another type or a charset other than
// UTF-8); only an empty body may come without one.
func decodeJSON(r *http.Request, v any, allowEmpty bool) error {
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		mt, params, err := mime.ParseMediaType(ct)
		cs, hasCharset := params["charset"]
		if err != nil || mt != "application/json" || (hasCharset && !strings.EqualFold(cs, "utf-8")) {
			return &errDecode{http.StatusUnsupportedMediaType, apiv1.CodeUnsupportedMedia, fmt.Sprintf("content type %q: want application/json", truncate(ct, 100))}
		}
	}
	body, err := io.ReadAll(r.Body)
	if rc := state(r.Context()).rc; rc != nil {
		_ = rc.SetReadDeadline(time.Time{}) // the body is read: no deadline while the handler works
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &errDecode{http.StatusRequestEntityTooLarge, apiv1.CodeBodyTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)}
		}
		return &errDecode{http.StatusBadRequest, apiv1.CodeBadRequest, "the request body could not be read"}
	}
	if len(body) > 0 && ct == "" {
		return &errDecode{http.StatusUnsupportedMediaType, apiv1.CodeUnsupportedMedia, "a request body needs Content-Type: application/json"}
	}
	if strings.TrimSpace(string(body)) == "" {
		if allowEmpty {
			return nil
		}
		return &errDecode{http.StatusBadRequest, apiv1.CodeBadRequest, "a JSON object is required"}
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &errDecode{http.StatusBadRequest, apiv1.CodeBadRequest, "request body: " + describeJSONError(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &errDecode{http.StatusBadRequest, apiv1.CodeBadRequest, "request body: one JSON object expected, found more data after it"}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q: want %s, got %s", typ.Field, typ.Type, typ.Value)
		}
		return fmt.Sprintf("want a JSON object, got %s", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	// DisallowUnknownFields: `json: unknown field "x"`.
	return strings.TrimPrefix(err.Error(), "json: ")
}

func (a *API) writeDecodeError(w http.ResponseWriter, r *http.Request, err error) {
	var de *errDecode
	if errors.As(err, &de) {
		a.writeError(w, r, de.status, de.code, de.msg, false)
		return
	}
	a.writeError(w, r, http.StatusBadRequest, apiv1.CodeBadRequest, err.Error(), false)
}
