// The instance's identity, read from the instance metadata service. The SDK's IMDS client speaks IMDSv2
// (a session token from PUT /latest/api/token, sent with every GET); the launch template sets
// HttpTokens=required, so IMDSv1 is never used.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Identity is what the agent knows about its instance.
type Identity struct {
	InstanceID       string
	InstanceType     string
	AvailabilityZone string
}

// ReadIdentity reads the instance's identity from IMDS.
func ReadIdentity(ctx context.Context, api MetadataAPI) (Identity, error) {
	var id Identity
	for _, f := range []struct {
		path string
		dst  *string
	}{
		{"instance-id", &id.InstanceID},
		{"instance-type", &id.InstanceType},
		{"placement/availability-zone", &id.AvailabilityZone},
	} {
		v, err := getMetadata(ctx, api, f.path)
		if err != nil {
			return Identity{}, fmt.Errorf("reading instance identity: %w", err)
		}
		*f.dst = v
	}
	if id.InstanceID == "" {
		return Identity{}, errors.New("reading instance identity: empty instance id")
	}
	return id, nil
}

// errNoMetadata is returned for a metadata path IMDS does not have (404), e.g. a tag not set.
var errNoMetadata = errors.New("no such metadata")

// getMetadata reads one metadata value as a trimmed string.
func getMetadata(ctx context.Context, api MetadataAPI, path string) (string, error) {
	out, err := api.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
			return "", fmt.Errorf("metadata %s: %w", path, errNoMetadata)
		}
		return "", fmt.Errorf("metadata %s: %w", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return "", fmt.Errorf("metadata %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readIdentityRetrying retries ReadIdentity for a while: early in boot the metadata service (or, in
// tests, the runtime's listener) may not answer yet.
func readIdentityRetrying(ctx context.Context, api MetadataAPI, every time.Duration, tries int) (Identity, error) {
	var last error
	for i := 0; i < tries; i++ {
		id, err := ReadIdentity(ctx, api)
		if err == nil {
			return id, nil
		}
		last = err
		if !sleep(ctx, every) {
			return Identity{}, ctx.Err()
		}
	}
	return Identity{}, last
}

// sleep waits d or until ctx is done; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
