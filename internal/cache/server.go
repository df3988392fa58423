// server.go: the HTTP face the runner's jobs see. Three parts, each what the published toolkit sends
// (actions/toolkit packages/cache, read at 4b9afa4):
//   - Twirp JSON at /twirp/github.actions.results.api.v1.CacheService/{CreateCacheEntry,
//     FinalizeCacheEntryUpload,GetCacheEntryDownloadURL} (src/internal/shared/cacheTwirpClient.ts posts
//     JSON with proto field names, generated/results/api/v1/cache.twirp-client.ts);
//   - the signed upload URL, which the toolkit writes with @azure/storage-blob's
//     BlockBlobClient.uploadFile (src/internal/uploadUtils.ts uploadCacheArchiveSDK): one Put Blob up to
//     128 MiB, else Put Block in 64 MiB blocks then Put Block List
//     (https://learn.microsoft.com/rest/api/storageservices/put-block-list);
//   - the signed download URL, which the toolkit reads with one plain GET when the host is not
//     *.blob.core.windows.net (src/internal/cacheHttpClient.ts downloadCache) and checks against
//     Content-Length. An entry on this disk is served here; an entry only S3 holds is answered
//     with S3's own presigned URL, as GitHub's service answers with a blob SAS URL (fill.go).
//
// The scope of every request is the run's as the control plane recorded it (Config.Scope), never
// anything the request says.
package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// twirpPrefix is the cache service's Twirp route (cacheTwirpClient.ts: `/twirp/${service}/${method}`).
const twirpPrefix = "/twirp/github.actions.results.api.v1.CacheService/"

// Config configures a Server.
type Config struct {
	Dir string // the local store, root-only
	// Scope returns the scope of the run the instance serves now, from the control plane's record.
	Scope func(ctx context.Context) (Scope, error)
	// Presign asks the control plane for a URL for req in the current run's scope; nil: local only.
	Presign func(ctx context.Context, req Request) (string, error)
	// MaxEntry is the largest entry a job may save (default 10 GiB).
	MaxEntry int64
	// RepoLimit is the most a repository keeps on this disk before the least recently used go
	// (default 10 GiB; GitHub's own per-repository limit).
	RepoLimit int64
	// MaxAge evicts local entries unused that long (default 7 days, GitHub's own).
	MaxAge time.Duration
	// ReservationTTL is how long a CreateCacheEntry holds its key against another save (default 10 min).
	ReservationTTL time.Duration
	// ReadyFile, when set, is written with the server's URL while it serves and removed when it
	// stops: the preload points jobs at the server only while it exists.
	ReadyFile string
	// Upstream is the results service the runner's jobs were given (GitHub's): every other route
	// (artifacts share ACTIONS_RESULTS_URL) goes there, and so does a cache request this server
	// cannot serve (no scope from the control plane): the job then gets GitHub's cache.
	Upstream *url.URL
	HTTP     *http.Client
	Logger   *slog.Logger
	Now      func() time.Time
}

// Stats are the server's counters since it started.
type Stats struct {
	LocalHits, RemoteHits, Misses int64
	BytesServed, BytesSaved       int64
	RemoteErrors                  int64
}

// Server serves the cache protocol.
type Server struct {
	cfg   Config
	local *local
	log   *slog.Logger

	mu       sync.Mutex
	uploads  map[string]*upload  // by upload id
	reserved map[string]*upload  // by object key
	tokens   map[string]download // download tokens
	nextID   int64

	uses  useNotes // local hits told to the control plane (uses.go)
	fills fills    // entries handed out as S3 URLs, copied to the disk when idle (fill.go)

	localHits, remoteHits, misses, bytesServed, bytesSaved, remoteErrors atomic.Int64
	base                                                                 atomic.Value // string: http://127.0.0.1:port
}

type upload struct {
	id      string
	object  string
	key     string
	version string
	expires time.Time
	size    atomic.Int64
	blob    bool // a whole blob was written
}

type download struct {
	object  string
	expires time.Time
}

// New makes a server over the local store in cfg.Dir.
func New(cfg Config) (*Server, error) {
	if cfg.Scope == nil {
		return nil, errors.New("cache: no scope source")
	}
	if cfg.MaxEntry <= 0 {
		cfg.MaxEntry = 10 << 30
	}
	if cfg.RepoLimit <= 0 {
		cfg.RepoLimit = 10 << 30
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 7 * 24 * time.Hour
	}
	if cfg.ReservationTTL <= 0 {
		cfg.ReservationTTL = 10 * time.Minute
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l, err := openLocal(cfg.Dir, cfg.RepoLimit, cfg.MaxAge, cfg.Now)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, local: l, log: cfg.Logger, uploads: map[string]*upload{},
		reserved: map[string]*upload{}, tokens: map[string]download{}}
	s.base.Store("")
	return s, nil
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{LocalHits: s.localHits.Load(), RemoteHits: s.remoteHits.Load(), Misses: s.misses.Load(),
		BytesServed: s.bytesServed.Load(), BytesSaved: s.bytesSaved.Load(), RemoteErrors: s.remoteErrors.Load()}
}

// Serve serves on ln (a loopback listener) until ctx is done. The URLs it hands out name ln's address.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.base.Store("http://" + ln.Addr().String())
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if s.cfg.ReadyFile != "" {
		if err := writeReady(s.cfg.ReadyFile, s.base.Load().(string)); err != nil {
			return err
		}
		defer os.Remove(s.cfg.ReadyFile)
	}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("cache: serving: %w", err)
	}
	return nil
}

// Handler routes the three parts of the protocol.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+twirpPrefix+"{method}", s.twirp)
	mux.HandleFunc("PUT /blob/cache/{id}", s.blobPut)
	mux.HandleFunc("GET /download/{token}", s.download)
	if s.cfg.Upstream != nil {
		mux.Handle("/", s.upstream())
	}
	return mux
}

// twirpError writes a Twirp error (https://twitchtv.github.io/twirp/docs/spec_v7.html#error-codes).
func twirpError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "msg": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// twirpRequest holds the fields of the three requests, under their proto names (what the client
// sends) and their JSON names (what protobuf's JSON mapping also accepts).
type twirpRequest struct {
	Key          string   `json:"key"`
	Version      string   `json:"version"`
	RestoreKeys  []string `json:"restore_keys"`
	RestoreKeys2 []string `json:"restoreKeys"`
	SizeBytes    any      `json:"size_bytes"`
	SizeBytes2   any      `json:"sizeBytes"`
}

func (s *Server) twirp(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var req twirpRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		twirpError(w, http.StatusBadRequest, "malformed", "the request is not JSON")
		return
	}
	scope, err := s.cfg.Scope(r.Context())
	if err == nil {
		err = scope.Validate()
	}
	if err != nil {
		s.log.Warn("cache: no scope for this run", "err", err)
		if s.cfg.Upstream != nil {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			s.upstream().ServeHTTP(w, r)
			return
		}
		twirpError(w, http.StatusForbidden, "permission_denied", "this runner serves no run with a cache scope")
		return
	}
	s.local.limit(scope.RepositoryLimit, scope.MaxAge) // the class's limits, from the control plane
	switch r.PathValue("method") {
	case "GetCacheEntryDownloadURL":
		s.lookup(w, r, scope, req)
	case "CreateCacheEntry":
		s.create(w, scope, req)
	case "FinalizeCacheEntryUpload":
		s.finalize(w, r, scope, req)
	default:
		twirpError(w, http.StatusNotFound, "bad_route", "no such method")
	}
}

// upstream forwards a request to the results service the job was given.
func (s *Server) upstream() http.Handler {
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(s.cfg.Upstream)
		pr.Out.Host = s.cfg.Upstream.Host
	}}
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// create reserves (key, version) under the run's write prefix and hands out an upload URL.
func (s *Server) create(w http.ResponseWriter, scope Scope, req twirpRequest) {
	object, err := ObjectKey(scope.WritePrefix(), req.Key, req.Version)
	if err != nil {
		twirpError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.reserved[object]; ok && now.Before(u.expires) {
		writeJSON(w, map[string]any{"ok": false, "message": "another job is saving this key"})
		return
	}
	if _, ok := s.local.get(object); ok {
		writeJSON(w, map[string]any{"ok": false, "message": "an entry with this key already exists"})
		return
	}
	u := &upload{id: randomID(), object: object, key: req.Key, version: req.Version, expires: now.Add(s.cfg.ReservationTTL)}
	if err := os.MkdirAll(s.uploadDir(u.id), 0o700); err != nil {
		twirpError(w, http.StatusInternalServerError, "internal", "no room for the upload")
		return
	}
	s.reserved[object] = u
	s.uploads[u.id] = u
	// A path-style URL (account, container, blob): @azure/storage-blob reads an IP host's URL so
	// (isIpEndpointStyle), and appends its own query to ours.
	writeJSON(w, map[string]any{"ok": true, "signed_upload_url": s.base.Load().(string) + "/blob/cache/" + u.id + "?sv=local"})
}

func (s *Server) uploadDir(id string) string { return filepath.Join(s.cfg.Dir, "uploads", id) }

// azureError writes a Blob service error (https://learn.microsoft.com/rest/api/storageservices/status-and-error-codes2).
func azureError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-ms-error-code", code)
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
}

func (s *Server) blobPut(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	u, ok := s.uploads[r.PathValue("id")]
	s.mu.Unlock()
	if !ok || !s.cfg.Now().Before(u.expires) {
		azureError(w, http.StatusNotFound, "BlobNotFound")
		return
	}
	q := r.URL.Query()
	switch q.Get("comp") {
	case "":
		s.putFile(w, r, u, filepath.Join(s.uploadDir(u.id), "blob"), true)
	case "block":
		id, err := base64.StdEncoding.DecodeString(q.Get("blockid"))
		if err != nil || len(id) == 0 || len(id) > 64 {
			azureError(w, http.StatusBadRequest, "InvalidQueryParameterValue")
			return
		}
		s.putFile(w, r, u, filepath.Join(s.uploadDir(u.id), "block-"+hex.EncodeToString(id)), false)
	case "blocklist":
		s.putBlockList(w, r, u)
	default:
		azureError(w, http.StatusBadRequest, "UnsupportedQueryParameter")
	}
}

// putFile writes the body to path, counting it against the entry's limit.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, u *upload, path string, whole bool) {
	if r.ContentLength > s.cfg.MaxEntry || u.size.Load()+max(r.ContentLength, 0) > s.cfg.MaxEntry {
		azureError(w, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge")
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		azureError(w, http.StatusInternalServerError, "InternalError")
		return
	}
	n, err := io.Copy(f, http.MaxBytesReader(w, r.Body, s.cfg.MaxEntry-u.size.Load()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			azureError(w, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge")
			return
		}
		azureError(w, http.StatusBadRequest, "IncompleteBody")
		return
	}
	u.size.Add(n)
	if whole {
		s.mu.Lock()
		u.blob = true
		s.mu.Unlock()
	}
	s.created(w, u)
}

// created answers a Put Blob, Put Block or Put Block List: 201 with the headers the Blob service sends.
func (s *Server) created(w http.ResponseWriter, u *upload) {
	w.Header().Set("ETag", `"`+u.id+`"`)
	w.Header().Set("Last-Modified", s.cfg.Now().UTC().Format(http.TimeFormat))
	w.Header().Set("x-ms-request-id", randomID())
	w.Header().Set("x-ms-request-server-encrypted", "true")
	w.WriteHeader(http.StatusCreated)
}

// blockList is the body of Put Block List.
type blockList struct {
	Latest      []string `xml:"Latest"`
	Committed   []string `xml:"Committed"`
	Uncommitted []string `xml:"Uncommitted"`
}

func (s *Server) putBlockList(w http.ResponseWriter, r *http.Request, u *upload) {
	var bl blockList
	if err := xml.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&bl); err != nil {
		azureError(w, http.StatusBadRequest, "InvalidXmlDocument")
		return
	}
	ids := append(append(bl.Latest, bl.Uncommitted...), bl.Committed...)
	dst := filepath.Join(s.uploadDir(u.id), "blob.tmp")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		azureError(w, http.StatusInternalServerError, "InternalError")
		return
	}
	for _, id := range ids {
		raw, err := base64.StdEncoding.DecodeString(id)
		if err != nil {
			out.Close()
			azureError(w, http.StatusBadRequest, "InvalidBlockList")
			return
		}
		in, err := os.Open(filepath.Join(s.uploadDir(u.id), "block-"+hex.EncodeToString(raw)))
		if err != nil {
			out.Close()
			azureError(w, http.StatusBadRequest, "InvalidBlockList")
			return
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			azureError(w, http.StatusInternalServerError, "InternalError")
			return
		}
	}
	if err := out.Close(); err != nil {
		azureError(w, http.StatusInternalServerError, "InternalError")
		return
	}
	if err := os.Rename(dst, filepath.Join(s.uploadDir(u.id), "blob")); err != nil {
		azureError(w, http.StatusInternalServerError, "InternalError")
		return
	}
	s.mu.Lock()
	u.blob = true
	s.mu.Unlock()
	s.created(w, u)
}

func sizeOf(v any) (int64, bool) {
	switch x := v.(type) {
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	case float64:
		return int64(x), true
	}
	return 0, false
}

// finalize makes the uploaded blob the entry: locally first, then in S3 when the control plane
// presigns the put. A failed S3 put leaves the entry local (a warning in the agent's log, not the job's).
func (s *Server) finalize(w http.ResponseWriter, r *http.Request, scope Scope, req twirpRequest) {
	object, err := ObjectKey(scope.WritePrefix(), req.Key, req.Version)
	if err != nil {
		twirpError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	size, ok := sizeOf(req.SizeBytes)
	if !ok {
		size, ok = sizeOf(req.SizeBytes2)
	}
	s.mu.Lock()
	u, held := s.reserved[object]
	if !held || !u.blob || !ok || !u.blobSizeMatches(s, size) {
		s.mu.Unlock()
		writeJSON(w, map[string]any{"ok": false, "message": "no finished upload of this key"})
		return
	}
	delete(s.reserved, object)
	delete(s.uploads, u.id)
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	dir := s.uploadDir(u.id)
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "blob")
	if err := s.local.commit(object, path, size, s.cfg.Now()); err != nil {
		twirpError(w, http.StatusInternalServerError, "internal", "could not keep the entry")
		return
	}
	s.bytesSaved.Add(size)
	if s.cfg.Presign != nil {
		if err := s.putRemote(r.Context(), object, size); err != nil {
			s.remoteErrors.Add(1)
			s.log.Warn("cache: kept on this instance only", "key", req.Key, "err", err)
		}
	}
	writeJSON(w, map[string]any{"ok": true, "entry_id": strconv.FormatInt(id, 10)})
}

// blobSizeMatches checks the blob's size on disk (a block upload counts its blocks, not the blob).
func (u *upload) blobSizeMatches(s *Server, size int64) bool {
	st, err := os.Stat(filepath.Join(s.uploadDir(u.id), "blob"))
	return err == nil && st.Size() == size
}

func (s *Server) putRemote(ctx context.Context, object string, size int64) error {
	url, err := s.cfg.Presign(ctx, Request{Op: OpPut, Object: object, Size: size})
	if err != nil {
		return err
	}
	f, err := os.Open(s.local.path(object))
	if err != nil {
		return err
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, f)
	if err != nil {
		return err
	}
	req.ContentLength = size
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("putting to S3: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("putting to S3: %s", resp.Status)
	}
	return nil
}

// candidate is an entry a lookup may answer with.
type candidate struct {
	object  string
	created time.Time
	size    int64 // S3's listing's (a remote candidate's)
	remote  bool
}

// lookup answers GetCacheEntryDownloadURL in GitHub's order ("Cache key matching",
// https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/caching-dependencies-to-speed-up-workflows#matching-a-cache-key):
// in each read scope in turn, the exact key, then the newest entry whose key starts with the key,
// then the same for each restore key. Before any of that, an exact match kept on this disk in any
// read scope is served without asking S3.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, scope Scope, req twirpRequest) {
	restore := req.RestoreKeys
	if len(restore) == 0 {
		restore = req.RestoreKeys2
	}
	keys := append([]string{req.Key}, restore...)
	if len(keys) > 10 {
		twirpError(w, http.StatusBadRequest, "invalid_argument", "at most 10 keys")
		return
	}
	prefixes := scope.ReadPrefixes()
	for _, p := range prefixes {
		object, err := ObjectKey(p, req.Key, req.Version)
		if err != nil {
			twirpError(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		if _, ok := s.local.get(object); ok {
			s.answer(r.Context(), w, candidate{object: object}, req.Key)
			return
		}
	}
	for _, p := range prefixes {
		for i, k := range keys {
			kp, err := KeyPrefix(p, k, req.Version)
			if err != nil {
				twirpError(w, http.StatusBadRequest, "invalid_argument", err.Error())
				return
			}
			cands := s.candidates(r.Context(), kp)
			if len(cands) == 0 {
				continue
			}
			if i == 0 {
				exact, _ := ObjectKey(p, k, req.Version)
				for _, c := range cands {
					if c.object == exact {
						s.answer(r.Context(), w, c, k)
						return
					}
				}
			}
			sort.Slice(cands, func(a, b int) bool { return cands[a].created.After(cands[b].created) })
			key, _ := KeyOf(cands[0].object)
			s.answer(r.Context(), w, cands[0], key)
			return
		}
	}
	s.misses.Add(1)
	writeJSON(w, map[string]any{"ok": false})
}

// candidates lists what this disk and S3 hold under prefix; S3 is skipped when it cannot answer.
func (s *Server) candidates(ctx context.Context, prefix string) []candidate {
	var out []candidate
	seen := map[string]bool{}
	for _, e := range s.local.list(prefix) {
		out = append(out, candidate{object: e.Object, created: e.Created})
		seen[e.Object] = true
	}
	if s.cfg.Presign == nil {
		return out
	}
	remote, err := s.listRemote(ctx, prefix)
	if err != nil {
		s.remoteErrors.Add(1)
		s.log.Warn("cache: S3 listing failed; answering from this instance", "err", err)
		return out
	}
	for _, c := range remote {
		if !seen[c.object] {
			out = append(out, c)
		}
	}
	return out
}

// listBucketResult is the part of ListObjectsV2's answer read here
// (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html).
type listBucketResult struct {
	Contents []struct {
		Key          string    `xml:"Key"`
		LastModified time.Time `xml:"LastModified"`
		Size         int64     `xml:"Size"`
	} `xml:"Contents"`
}

func (s *Server) listRemote(ctx context.Context, prefix string) ([]candidate, error) {
	url, err := s.cfg.Presign(ctx, Request{Op: OpList, Object: prefix})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing S3: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing S3: %s", resp.Status)
	}
	var res listBucketResult
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&res); err != nil {
		return nil, fmt.Errorf("listing S3: %w", err)
	}
	out := make([]candidate, 0, len(res.Contents))
	for _, c := range res.Contents {
		if strings.HasPrefix(c.Key, prefix) {
			out = append(out, candidate{object: c.Key, created: c.LastModified, size: c.Size, remote: true})
		}
	}
	return out, nil
}

// answer hands out c's download URL: this server's for an entry on this disk, S3's own for an
// entry only S3 holds. The job then reads S3 directly, as the toolkit reads GitHub's blob storage
// with the SAS URL the cache service hands out: the bytes never pass through this server, and the
// local copy is made later, when no job runs (fill.go).
//
// Both clients read a presigned S3 URL with one plain GET:
//   - @actions/cache 6.3.0, lib/internal/cacheHttpClient.js downloadCache: a host not ending in
//     .blob.core.windows.net goes to downloadCacheHttpClient (lib/internal/downloadUtils.js), one
//     GET with the Actions http-client, retried on 5xx (retryHttpClientResponse), the file's size
//     checked against Content-Length (which S3's GetObject sends);
//   - tonistiigi/go-actions-cache, cache_v2.go downloadV2: the Azure SDK's blockblob DownloadStream,
//     a GET of the URL as given with its own query kept (S3 ignores the x-ms-* headers, which are
//     not signed), no Range from offset 0 and "bytes=N-" on a resumed read, both of which S3
//     answers (200, 206); a 403 (an expired URL) makes it look the key up again (ce.reload).
//
// A presign the control plane refuses or does not answer is a miss for the job (ok false), never a
// URL that fails.
func (s *Server) answer(ctx context.Context, w http.ResponseWriter, c candidate, key string) {
	if c.remote {
		url, err := s.cfg.Presign(ctx, Request{Op: OpGet, Object: c.object})
		if err != nil {
			s.remoteErrors.Add(1)
			s.misses.Add(1)
			s.log.Warn("cache: S3 GET not presigned; answering a miss", "err", err)
			writeJSON(w, map[string]any{"ok": false})
			return
		}
		s.remoteHits.Add(1)
		s.bytesServed.Add(c.size)
		s.fills.remember(c.object, url, s.cfg.Now()) // fill.go
		writeJSON(w, map[string]any{"ok": true, "signed_download_url": url, "matched_key": key})
		return
	}
	s.localHits.Add(1)
	s.noteUse(c.object) // uses.go
	token := randomID()
	s.mu.Lock()
	now := s.cfg.Now()
	for t, d := range s.tokens {
		if now.After(d.expires) {
			delete(s.tokens, t)
		}
	}
	s.tokens[token] = download{object: c.object, expires: now.Add(time.Hour)}
	s.mu.Unlock()
	writeJSON(w, map[string]any{"ok": true, "signed_download_url": s.base.Load().(string) + "/download/" + token, "matched_key": key})
}

// download serves an entry from this disk. A token names only an entry that was on the disk at its
// lookup; one evicted since (a save of the same job can push it out) is sent on to S3's presigned
// URL with a 307, which both clients follow for a GET (@actions/http-client's allowRedirects,
// default true; Go's http.Client under the Azure SDK): the restore is a remote one instead of a
// failed one. Without S3, or when the presign is refused, it is a 404 (a restore warning).
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	d, ok := s.tokens[r.PathValue("token")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	e, ok := s.local.get(d.object)
	var f *os.File
	if ok {
		var err error
		if f, err = os.Open(s.local.path(d.object)); err != nil {
			ok = false
		}
	}
	if !ok {
		s.evictedSinceLookup(w, r, d.object)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
	n, _ := io.Copy(w, f)
	s.bytesServed.Add(n)
}

// evictedSinceLookup answers the download of an entry the disk no longer holds (download).
func (s *Server) evictedSinceLookup(w http.ResponseWriter, r *http.Request, object string) {
	if s.cfg.Presign == nil {
		http.NotFound(w, r)
		return
	}
	url, err := s.cfg.Presign(r.Context(), Request{Op: OpGet, Object: object})
	if err != nil {
		s.remoteErrors.Add(1)
		s.log.Warn("cache: an entry evicted since its lookup, and its S3 GET not presigned", "err", err)
		http.NotFound(w, r)
		return
	}
	s.log.Info("cache: an entry evicted since its lookup is read from S3")
	http.Redirect(w, r, url, http.StatusTemporaryRedirect)
}
