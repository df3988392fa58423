// uses.go: "least recently used" in the bucket means used, not written. Objects are written once
// (a key's entry is never rewritten), so an object's LastModified is its save; a restore from the
// bucket is a GET the control plane presigned. Uses records such a restore as an empty marker object,
// at UseMarker(object), whose LastModified is the use; the eviction pass lists the markers
// beside the objects and counts an object as used at the later of its write and its marker, and
// deletes the markers of objects that are gone. A hot entry costs one marker write per object per
// Every per replica (default 1 hour), however many restores it serves: the write rate is bounded by
// the number of distinct entries restored, not by the restores.
package cachebucket

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

// UsePrefix is where the use markers live: under v1/, where the reconciler's role may write,
// list and delete (examples/complete/cache.tf) and the lifecycle backstop applies, in a segment
// that is never a repository's (an escaped owner/name always holds "~2F"; cache.RepositoryOf).
const UsePrefix = "v1/used/"

// UseMarker is the marker object of a cache object (v1/<repository>/...).
func UseMarker(object string) string { return UsePrefix + strings.TrimPrefix(object, "v1/") }

// markerObject is the cache object of a marker key.
func markerObject(marker string) string { return "v1/" + strings.TrimPrefix(marker, UsePrefix) }

// PutAPI is the part of the S3 client Uses writes with; *s3.Client satisfies it.
type PutAPI interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// Uses records restores as use markers, at most one write per object per Every.
type Uses struct {
	S3     PutAPI
	Bucket string
	Every  time.Duration // default 1 hour: well under any max age (at least 1 hour, GitHub's 7 days by default)
	Now    func() time.Time

	mu      sync.Mutex
	written map[string]time.Time // object -> when its marker was last written by this replica
}

// maxTracked bounds the memory of Uses; past it the record starts over (at worst one more write per object).
const maxTracked = 100000

// Used records a use of object now, unless this replica recorded one within Every. It reports
// whether it wrote a marker.
func (u *Uses) Used(ctx context.Context, object string) (bool, error) {
	if _, ok := cache.RepositoryOf(object); !ok {
		return false, nil
	}
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	every := u.Every
	if every <= 0 {
		every = time.Hour
	}
	t := now()
	u.mu.Lock()
	if last, ok := u.written[object]; ok && t.Sub(last) < every {
		u.mu.Unlock()
		return false, nil
	}
	if u.written == nil || len(u.written) >= maxTracked {
		u.written = map[string]time.Time{}
	}
	u.written[object] = t // claimed before the write: concurrent restores of one entry write once
	u.mu.Unlock()
	_, err := u.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: &u.Bucket, Key: aws.String(UseMarker(object)),
		Body: bytes.NewReader(nil), ContentLength: aws.Int64(0)})
	if err != nil {
		u.mu.Lock()
		delete(u.written, object) // the next restore tries again
		u.mu.Unlock()
		return false, fmt.Errorf("cache bucket: recording a use of %.80q: %w", object, err)
	}
	return true, nil
}
