// Package terminate terminates EC2 instances in batches, tolerant of ids EC2 no longer knows, and
// says which EC2 errors mean an instance is gone. Every caller that terminates by id uses it:
// refresh (expiry, orphans), warm-pool scale-in, the claim registrar's discard and the fleet's
// clean-up of a failed launch.
//
// EC2 fails a whole TerminateInstances call when any one id is unknown (InvalidInstanceID.NotFound)
// or malformed (InvalidInstanceID.Malformed), and names the offending ids in the message ("The
// instance ID 'i-1' does not exist", "The instance IDs 'i-1, i-2' do not exist", `Invalid id:
// "x"`). Such an id must not block the rest of its batch: it is dropped and the batch retried, or,
// when the message names none of the batch's ids, the batch is terminated one id at a time. Any
// other failure (throttling, authorisation, an outage) fails the batch as a whole: retrying it id
// by id would only multiply the calls EC2 refuses. Terminating an instance that is already
// shutting down or terminated succeeds, as in EC2, so a retried termination is harmless.
//
// EC2's API is eventually consistent ("Eventual consistency in the Amazon EC2 API", EC2 developer
// guide, https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html): right after a
// launch, TerminateInstances may answer InvalidInstanceID.NotFound for an instance that exists,
// and that answer "does not mean the instance was or will be terminated". So Gone is proof only
// for an instance launched more than ConsistencyWindow ago (Result.Proven); a record whose
// instance was launched since stays terminating, and its termination is asked again.
package terminate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

// API is the part of the EC2 client termination uses; *ec2.Client satisfies it.
type API interface {
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// MaxBatch is EC2's limit on instance ids per TerminateInstances call.
const MaxBatch = 1000

// Result is what a termination did. Every id given is in exactly one of Done, Gone and Failed.
type Result struct {
	Done   []string // accepted by EC2: shutting down or already terminated
	Gone   []string // unknown to EC2 (long terminated) or malformed: cannot be running
	Failed []string // refused otherwise: left as they were
	Calls  int      // TerminateInstances calls made
	Errs   []error  // one per failed batch or id, naming its ids
}

// Err joins the failures, or is nil.
func (r Result) Err() error { return errors.Join(r.Errs...) }

// ConsistencyWindow is how long after its launch an instance EC2's API answers unknown may still
// exist. The EC2 guide on eventual consistency advises backing off "up to about five minutes"
// before trusting what the API says of a resource just created.
const ConsistencyWindow = 5 * time.Minute

// Proven splits Gone: gone are the ids whose instance was launched (launchedAt; the record's
// creation, which follows the launch, will do) at least ConsistencyWindow before now, or at a time
// not known (zero); unseen are those launched since, which EC2 may not show yet although they run.
// An unseen instance's record must not be ended: it stays terminating and its termination is
// asked again later (refresh retries every terminating record), until EC2 shows the instance or
// the window has passed.
func (r Result) Proven(launchedAt func(id string) time.Time, now time.Time) (gone, unseen []string) {
	for _, id := range r.Gone {
		if at := launchedAt(id); !at.IsZero() && now.Sub(at) < ConsistencyWindow {
			unseen = append(unseen, id)
			continue
		}
		gone = append(gone, id)
	}
	return gone, unseen
}

// Batches terminates ids, size per call (at most MaxBatch; below 1 means 1).
func Batches(ctx context.Context, api API, ids []string, size int) Result {
	var res Result
	for batch := range slices.Chunk(ids, min(max(size, 1), MaxBatch)) {
		res.batch(ctx, api, slices.Clone(batch))
	}
	return res
}

func (res *Result) batch(ctx context.Context, api API, batch []string) {
	for len(batch) > 0 {
		err := res.call(ctx, api, batch)
		if err == nil {
			res.Done = append(res.Done, batch...)
			return
		}
		if !Gone(err) {
			res.Failed = append(res.Failed, batch...)
			res.Errs = append(res.Errs, fmt.Errorf("terminating %s: %w", strings.Join(batch, ", "), err))
			return
		}
		named := mentioned(errorMessage(err), batch)
		if len(named) == 0 {
			res.oneByOne(ctx, api, batch)
			return
		}
		res.Gone = append(res.Gone, named...)
		batch = slices.DeleteFunc(batch, func(id string) bool { return slices.Contains(named, id) })
	}
}

func (res *Result) oneByOne(ctx context.Context, api API, ids []string) {
	for _, id := range ids {
		err := res.call(ctx, api, []string{id})
		switch {
		case err == nil:
			res.Done = append(res.Done, id)
		case Gone(err):
			res.Gone = append(res.Gone, id)
		default:
			res.Failed = append(res.Failed, id)
			res.Errs = append(res.Errs, fmt.Errorf("terminating %s: %w", id, err))
		}
	}
}

func (res *Result) call(ctx context.Context, api API, ids []string) error {
	res.Calls++
	_, err := api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	return err
}

// Gone reports an EC2 error saying an instance does not exist (any more: EC2 forgets terminated
// instances about an hour after termination) or that its id cannot be parsed: either way nothing
// by that id is running. Right after a launch EC2's eventual consistency can answer NotFound for
// an instance that does exist, so a caller terminating instances launched lately must not take
// Gone as proof: Result.Proven says which ids it may.
func Gone(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed":
		return true
	}
	return false
}

func errorMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return err.Error()
}

// mentioned returns the ids that msg names as whole words (so i-0abc is not found inside
// i-0abcdef0).
func mentioned(msg string, ids []string) []string {
	var out []string
	for _, id := range ids {
		if id == "" {
			continue
		}
		for rest := msg; ; {
			i := strings.Index(rest, id)
			if i < 0 {
				break
			}
			before, after := byte(' '), byte(' ')
			if i > 0 {
				before = rest[i-1]
			}
			if end := i + len(id); end < len(rest) {
				after = rest[end]
			}
			if !wordByte(before) && !wordByte(after) {
				out = append(out, id)
				break
			}
			rest = rest[i+len(id):]
		}
	}
	return out
}

func wordByte(c byte) bool {
	return c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
