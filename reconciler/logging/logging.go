// Package logging builds the reconciler's slog logger: JSON lines, with the attributes of the
// request being served (request id, run id, instance id) taken from the context, and the domain
// packages' "run" and "instance" keys renamed to run_id and instance_id so that one query finds
// every line about a run or an instance, whichever package wrote it.
package logging

import (
	"context"
	"io"
	"log/slog"
)

// Attribute keys used across the reconciler's logs.
const (
	KeyRequestID  = "request_id"
	KeyRunID      = "run_id"
	KeyInstanceID = "instance_id"
)

// renamed maps the domain packages' keys to the reconciler's.
var renamed = map[string]string{"run": KeyRunID, "instance": KeyInstanceID}

// New returns a JSON logger writing to w at level.
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 {
				if k, ok := renamed[a.Key]; ok {
					a.Key = k
				}
			}
			return a
		},
	})
	return slog.New(Handler(h))
}

type ctxKey struct{}

// With returns a context whose log lines (written with the *Context methods of a logger from
// New or Handler) carry attrs as well. Later attributes of the same key win.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	all := make([]slog.Attr, 0, len(prev)+len(attrs))
	all = append(all, prev...)
	all = append(all, attrs...)
	return context.WithValue(ctx, ctxKey{}, all)
}

// Attrs returns the attributes With put in ctx.
func Attrs(ctx context.Context) []slog.Attr {
	a, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	return a
}

// Handler wraps h so that records carry the context's attributes (except those of a key the record
// or the logger already has).
func Handler(h slog.Handler) slog.Handler { return ctxHandler{Handler: h} }

type ctxHandler struct {
	slog.Handler
	keys map[string]bool // keys given to WithAttrs (and their renamed forms)
}

func mark(seen map[string]bool, key string) {
	seen[key] = true
	if k, ok := renamed[key]; ok {
		seen[k] = true
	}
}

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs := Attrs(ctx); len(attrs) > 0 {
		seen := map[string]bool{}
		for k := range h.keys {
			seen[k] = true
		}
		r.Attrs(func(a slog.Attr) bool {
			mark(seen, a.Key)
			return true
		})
		for i := len(attrs) - 1; i >= 0; i-- { // the latest of a key wins
			if a := attrs[i]; !seen[a.Key] {
				seen[a.Key] = true
				r.AddAttrs(a)
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h ctxHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	keys := make(map[string]bool, len(h.keys)+len(attrs))
	for k := range h.keys {
		keys[k] = true
	}
	for _, a := range attrs {
		mark(keys, a.Key)
	}
	return ctxHandler{Handler: h.Handler.WithAttrs(attrs), keys: keys}
}

func (h ctxHandler) WithGroup(name string) slog.Handler {
	return ctxHandler{Handler: h.Handler.WithGroup(name), keys: h.keys}
}
