// TerminateInstances in batches, tolerant of ids EC2 no longer knows.
//
// EC2 fails a whole TerminateInstances call when any one id is unknown (InvalidInstanceID.NotFound)
// or malformed (InvalidInstanceID.Malformed), and names the offending ids in the message ("The
// instance ID 'i-1' does not exist", "The instance IDs 'i-1, i-2' do not exist", `Invalid id:
// "x"`). Such an id must not block the rest of its batch: it is dropped and the batch retried, or,
// when the message names none of the batch's ids, the batch is terminated one id at a time.
// Terminating an instance that is already shutting down or terminated succeeds, as in EC2, so a
// retried termination is harmless.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

// terminateResult is what a termination did.
type terminateResult struct {
	done  []string // accepted by EC2: shutting down or already terminated
	gone  []string // unknown to EC2 (long terminated) or malformed: cannot be running
	calls int
	errs  []error // batches (or ids) that failed otherwise; they stay as they were
}

// terminate terminates ids in batches of BatchSize.
func (r *Refresher) terminate(ctx context.Context, ids []string) terminateResult {
	var res terminateResult
	for batch := range slices.Chunk(ids, r.opts.BatchSize) {
		r.terminateBatch(ctx, slices.Clone(batch), &res)
	}
	return res
}

func (r *Refresher) terminateBatch(ctx context.Context, batch []string, res *terminateResult) {
	for len(batch) > 0 {
		err := r.terminateCall(ctx, batch, res)
		if err == nil {
			res.done = append(res.done, batch...)
			return
		}
		if !isUnknownID(err) {
			res.errs = append(res.errs, fmt.Errorf("terminating %s: %w", strings.Join(batch, ", "), err))
			return
		}
		named := mentioned(errorMessage(err), batch)
		if len(named) == 0 {
			r.terminateOneByOne(ctx, batch, res)
			return
		}
		res.gone = append(res.gone, named...)
		batch = slices.DeleteFunc(batch, func(id string) bool { return slices.Contains(named, id) })
	}
}

func (r *Refresher) terminateOneByOne(ctx context.Context, ids []string, res *terminateResult) {
	for _, id := range ids {
		err := r.terminateCall(ctx, []string{id}, res)
		switch {
		case err == nil:
			res.done = append(res.done, id)
		case isUnknownID(err):
			res.gone = append(res.gone, id)
		default:
			res.errs = append(res.errs, fmt.Errorf("terminating %s: %w", id, err))
		}
	}
}

func (r *Refresher) terminateCall(ctx context.Context, ids []string, res *terminateResult) error {
	res.calls++
	_, err := r.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	return err
}

// isUnknownID reports whether EC2 refused the call because of ids it does not know or cannot parse.
func isUnknownID(err error) bool {
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
