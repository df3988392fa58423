// s3.go: the local stack's S3, for the runner cache (internal/cache). It is gofakes3
// (github.com/johannesboyne/gofakes3, a Go module) with its in-memory backend, served in-process like
// the EC2 server: no other runtime to install, and it speaks the parts of the S3 REST API the cache
// uses (GetObject, PutObject, ListObjectsV2, path-style, presigned query parameters accepted).
// docs/cache.md says why this one.
package stack

import (
	"fmt"
	"net/http"
	"os"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// EnvS3 is the S3 endpoint the SDK and the cache's presigner read (service-specific endpoint).
const EnvS3 = "AWS_ENDPOINT_URL_S3"

// CacheBucket is the bucket the local stack's S3 holds from its start.
const CacheBucket = "runnerpool-cache"

// NewS3 returns the handler of an empty in-memory S3 holding CacheBucket.
func NewS3() (http.Handler, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(CacheBucket); err != nil {
		return nil, fmt.Errorf("stack: S3 bucket: %w", err)
	}
	return gofakes3.New(backend, gofakes3.WithAutoBucket(true)).Server(), nil
}

// startS3 serves an S3 for the stack on a free loopback port (Endpoints.S3).
func (s *Stack) startS3() error {
	h, err := NewS3()
	if err != nil {
		return err
	}
	lis, err := listen(0, "the S3 emulator")
	if err != nil {
		return err
	}
	s.Endpoints.S3 = baseURL(lis)
	s.serve(lis, h)
	return nil
}

// NodeDir returns the directory of the stack's npm packages (package.json and node_modules), for
// tests that run a published client such as @actions/cache.
func NodeDir() (string, error) { return findNodeDir(os.Getenv(EnvNodeDir)) }
