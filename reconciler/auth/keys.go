// The issuer's key set, cached and refetched on a budget.
//
// go-oidc's RemoteKeySet refetches the key set whenever a token names a key id it has not seen:
// anyone can make up a key id, so every forged token cost one request to the issuer, and while the
// issuer was unreachable a forged token got a retryable 503 instead of a 401. Here the key set is
// fetched when none is held (at most once per keyRetry), and refetched for an unknown key id at
// most once per RefetchInterval. A token that names a key id already held but does not verify
// never causes a fetch. Once a key set is held, every token that does not verify against it is a
// 401, whether or not the issuer answers; only while no key set was ever fetched is the answer
// 503 (nothing at all can be verified: an outage, for every caller alike).
package auth

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultRefetchInterval is the least time between two fetches of the key set caused by tokens
// naming a key id the cached set lacks.
const DefaultRefetchInterval = time.Minute

// keyRetry is the least time between two fetches while no key set is held.
const keyRetry = time.Second

// maxJWKSBytes bounds the key set document (GitHub's is a few KiB).
const maxJWKSBytes = 1 << 20

// errNoKeys: no key set was ever fetched, so no token can be verified (503).
var errNoKeys = errors.New("the issuer's key set could not be fetched")

// keySet is the issuer's signing keys. It implements oidc.KeySet over the cache alone: fetching
// happens in prepare, before go-oidc verifies, so a fetch failure is told apart from a bad token.
type keySet struct {
	url      string
	client   *http.Client
	now      func() time.Time
	interval time.Duration
	log      *slog.Logger

	mu   sync.RWMutex
	keys []jose.JSONWebKey // nil until a fetch succeeded

	fetchMu   sync.Mutex // one fetch at a time; guards lastFetch
	lastFetch time.Time  // last attempt, successful or not
	fetches   int        // attempts, for tests and logs
}

func newKeySet(url string, client *http.Client, now func() time.Time, interval time.Duration, log *slog.Logger) *keySet {
	return &keySet{url: url, client: client, now: now, interval: interval, log: log}
}

// cached returns the keys held and whether one has the key id (any key, for an empty key id).
func (k *keySet) cached(kid string) ([]jose.JSONWebKey, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, key := range k.keys {
		if kid == "" || key.KeyID == kid {
			return k.keys, true
		}
	}
	return k.keys, false
}

// prepare makes sure the keys a token names are loaded if they can be: it fetches the key set when
// none is held (at most once per keyRetry), or when the key id is unknown and no fetch happened in
// the last interval. It returns errNoKeys only while no key set is held; an unknown key id that a
// fetch did not bring (or that the budget did not allow to fetch) is left to verification to
// refuse.
func (k *keySet) prepare(ctx context.Context, kid string) error {
	if keys, ok := k.cached(kid); ok || (keys != nil && k.recentlyFetched()) {
		return nil
	}
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	keys, ok := k.cached(kid) // another request may have fetched while this one waited
	if ok {
		return nil
	}
	wait := k.interval
	if keys == nil {
		wait = keyRetry
	}
	if !k.lastFetch.IsZero() && k.now().Sub(k.lastFetch) < wait {
		if keys == nil {
			return errNoKeys
		}
		return nil
	}
	k.lastFetch = k.now()
	k.fetches++
	fetched, err := k.fetch(ctx)
	if err != nil {
		k.log.WarnContext(ctx, "oidc key set not fetched", "url", k.url, "key_id", kid, "error", err)
		if keys == nil {
			return fmt.Errorf("%w: %w", errNoKeys, err)
		}
		return nil
	}
	k.mu.Lock()
	k.keys = fetched
	k.mu.Unlock()
	return nil
}

func (k *keySet) recentlyFetched() bool {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	return !k.lastFetch.IsZero() && k.now().Sub(k.lastFetch) < k.interval
}

// fetchCount is how many fetches were attempted.
func (k *keySet) fetchCount() int {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	return k.fetches
}

// fetch reads the key set. Its context is detached from the request that caused it (others wait
// for the same fetch), bounded by the client's timeout and a limit of its own.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("key set request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the key set: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the key set: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the key set: %s", resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("the key set is larger than %d bytes", maxJWKSBytes)
	}
	return parseKeySet(body)
}

// parseKeySet reads a JWKS document, keeping the public RSA signing keys and skipping the rest
// (RFC 7517 section 5: keys of a type that is not understood are ignored, not fatal).
func parseKeySet(b []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("the key set is not JSON: %w", err)
	}
	keys := []jose.JSONWebKey{}
	for _, r := range raw.Keys {
		var key jose.JSONWebKey
		if err := json.Unmarshal(r, &key); err != nil {
			continue
		}
		if !key.Valid() || !key.IsPublic() || (key.Use != "" && key.Use != "sig") ||
			(key.Algorithm != "" && key.Algorithm != string(jose.RS256)) {
			continue
		}
		if _, ok := key.Key.(*rsa.PublicKey); !ok {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("the key set has no RS256 signing key")
	}
	return keys, nil
}

// parsedToken is a token Verify parsed already, handed to VerifySignature through go-oidc.
type parsedToken struct {
	raw string
	jws *jose.JSONWebSignature
}

type parsedKey struct{}

func withParsed(ctx context.Context, raw string, jws *jose.JSONWebSignature) context.Context {
	return context.WithValue(ctx, parsedKey{}, parsedToken{raw: raw, jws: jws})
}

// VerifySignature implements oidc.KeySet over the cached keys; it never fetches.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	var jws *jose.JSONWebSignature
	if p, ok := ctx.Value(parsedKey{}).(parsedToken); ok && p.raw == raw {
		jws = p.jws
	} else {
		var err error
		if jws, err = jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.RS256}); err != nil {
			return nil, fmt.Errorf("malformed jwt: %w", err)
		}
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.RLock()
	keys := k.keys
	k.mu.RUnlock()
	known := false
	for _, key := range keys {
		if kid != "" && key.KeyID != kid {
			continue
		}
		known = true
		if payload, err := jws.Verify(&key); err == nil {
			return payload, nil
		}
	}
	if !known {
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
	return nil, errors.New("the signature does not verify")
}
