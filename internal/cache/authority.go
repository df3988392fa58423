// authority.go: the control plane's side. The instance role holds no bucket access; each S3 request
// the agent's server makes goes to a URL the control plane presigned for the scope of the run it
// recorded for that instance (Authority.Presign), checked by prefix (Scope.Covers). A job that reached
// the instance's credentials, or the agent's server, can therefore reach no other repository's
// objects, no other ref's writes, and no object larger than the deployment allows.
package cache

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Request is one S3 request the agent asks the control plane to presign.
type Request struct {
	Op     Op
	Object string // an object key for get and put, a prefix for list
	Size   int64  // put: the object's size in bytes (signed into the URL as Content-Length)
}

// Authority presigns S3 requests for a run's scope. Presigned URLs are signed with SigV4 query
// parameters ("Authenticating Requests: Using Query Parameters",
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html); a put signs its
// Content-Length, so the holder cannot upload more than the size it declared.
type Authority struct {
	Bucket      string
	Region      string
	Endpoint    string // e.g. AWS_ENDPOINT_URL_S3 of an emulator (path-style); empty: the regional virtual-hosted endpoint
	Credentials aws.CredentialsProvider
	TTL         time.Duration // lifetime of a put's or a listing's URL; default 5 minutes
	// GetTTL is the lifetime of a GET's URL; default an hour. The job itself reads the entry with
	// it (server.go, answer), and the agent's server reads it again into its disk once no job runs
	// (fill.go), which may be after the job's last step. An hour is safe: the URL reads one object
	// the run may read, and the job that saw it could as well have kept its bytes. A URL signed
	// with temporary credentials (the reconciler's task role) ends when they do, perhaps sooner; a
	// fill whose URL no longer works is skipped.
	GetTTL   time.Duration
	MaxEntry int64 // largest object a put may declare; default 10 GiB
	Now      func() time.Time
}

// Presign returns a URL for req, or ErrDenied when req is outside scope, or ErrInvalid.
func (a Authority) Presign(ctx context.Context, scope Scope, req Request) (string, error) {
	if !scope.Covers(req.Op, req.Object) {
		return "", fmt.Errorf("presigning %s %.80q for %s %s: %w", req.Op, req.Object, scope.Repository, scope.Ref, ErrDenied)
	}
	maxEntry := a.MaxEntry
	if maxEntry <= 0 {
		maxEntry = 10 << 30
	}
	if req.Op == OpPut && (req.Size < 0 || req.Size > maxEntry) {
		return "", fmt.Errorf("presigning a put of %d bytes (at most %d): %w", req.Size, maxEntry, ErrDenied)
	}
	// A put that alone is over the repository's limit is refused: the eviction pass would delete
	// every other entry of the repository for it and then it too. A put that only brings the
	// repository over its limit is taken, and the pass evicts the least recently used down to the
	// limit, as GitHub's own cache does (docs/cache.md).
	if req.Op == OpPut && scope.RepositoryLimit > 0 && req.Size > scope.RepositoryLimit {
		return "", fmt.Errorf("presigning a put of %d bytes: over the repository's limit of %d: %w", req.Size, scope.RepositoryLimit, ErrDenied)
	}
	base := "https://" + a.Bucket + ".s3." + a.Region + ".amazonaws.com"
	if a.Endpoint != "" {
		base = strings.TrimRight(a.Endpoint, "/") + "/" + a.Bucket
	}
	method, target := http.MethodGet, base+"/"+req.Object
	switch req.Op {
	case OpList:
		target = base + "/?list-type=2&prefix=" + url.QueryEscape(req.Object)
	case OpPut:
		method = http.MethodPut
	}
	hr, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return "", fmt.Errorf("presigning %s: %w", req.Op, err)
	}
	ttl := a.TTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	if req.Op == OpGet {
		ttl = a.GetTTL
		if ttl <= 0 {
			ttl = time.Hour
		}
	}
	q := hr.URL.Query()
	q.Set("X-Amz-Expires", strconv.Itoa(int(ttl/time.Second)))
	hr.URL.RawQuery = q.Encode()
	if req.Op == OpPut {
		hr.ContentLength = req.Size
		hr.Header.Set("Content-Length", strconv.FormatInt(req.Size, 10))
	}
	creds, err := a.Credentials.Retrieve(ctx)
	if err != nil {
		return "", fmt.Errorf("presigning %s: credentials: %w", req.Op, err)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	u, _, err := v4.NewSigner().PresignHTTP(ctx, creds, hr, "UNSIGNED-PAYLOAD", "s3", a.Region, now())
	if err != nil {
		return "", fmt.Errorf("presigning %s: %w", req.Op, err)
	}
	return u, nil
}
