package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: the container health check of examples/complete's task (the image has no curl)
// exits 0 when the replica answers 200 and 1 when it answers otherwise or not at all.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(healthy.Close)
	draining := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(draining.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"healthy", []string{"-url", healthy.URL + "/healthz"}, 0, ""},
		{"unhealthy", []string{"-url", draining.URL + "/healthz"}, 1, "503 Service Unavailable"},
		{"not listening", []string{"-url", gone.URL + "/healthz", "-timeout", "2s"}, 1, "health check of"},
		{"stray argument", []string{"now"}, 2, "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"healthcheck"}, tc.args...), &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.wantCode, tc.wantStderr)
			}
		})
	}
}
