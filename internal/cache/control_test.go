package cache_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

// TestSignedRequestBindsEverything: a signature serves one instance, run, op, object and size,
// within MaxSkew of its time, under the pinned key only.
func TestSignedRequestBindsEverything(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pub := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	now := time.Now()
	base := cache.SignedRequest{Instance: "i-1", Run: "1:2:1", Op: cache.OpPut, Object: "v1/a/b", Size: 10}
	base.Sign(key, now)
	if !base.Verify(pub, now) {
		t.Fatal("a fresh request does not verify")
	}
	for name, change := range map[string]func(*cache.SignedRequest){
		"instance": func(r *cache.SignedRequest) { r.Instance = "i-2" },
		"run":      func(r *cache.SignedRequest) { r.Run = "1:3:1" },
		"op":       func(r *cache.SignedRequest) { r.Op = cache.OpGet },
		"object":   func(r *cache.SignedRequest) { r.Object = "v1/a/c" },
		"size":     func(r *cache.SignedRequest) { r.Size = 11 },
		"key":      func(r *cache.SignedRequest) { r.Sign(other, now) },
	} {
		r := base
		change(&r)
		if r.Verify(pub, now) {
			t.Errorf("a request with another %s verifies", name)
		}
	}
	if base.Verify(pub, now.Add(cache.MaxSkew+time.Second)) {
		t.Error("a stale request verifies")
	}
}

func TestReportRoundTrip(t *testing.T) {
	t.Parallel()
	st := cache.Stats{LocalHits: 3, RemoteHits: 1, Misses: 2, BytesServed: 100, BytesSaved: 50}
	got, ok := cache.ParseReport(st.Report())
	if !ok || got != st {
		t.Fatalf("ParseReport(Report()) = %+v, %v; want %+v", got, ok, st)
	}
	for _, bad := range []string{"", "cache local_hits=-1", "cache local_hits=x", "cache evil=1", "released"} {
		if _, ok := cache.ParseReport(bad); ok {
			t.Errorf("ParseReport(%q) accepted", bad)
		}
	}
}
