// Errors of the store, typed so callers can tell a lost race from a missing record from throttling
// without reading messages.
package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

var (
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("not found")
	// ErrNoTable: the table itself does not exist (always with ErrNotFound: no record is there).
	ErrNoTable = errors.New("no such table")
	// ErrConflict: the record exists but is not in the expected state (or run id): another writer
	// won the race. Callers ask for another candidate or re-read; they never retry blindly.
	ErrConflict = errors.New("conflict")
	// ErrThrottled: DynamoDB refused the call for capacity or rate reasons after the SDK's retries.
	ErrThrottled = errors.New("throttled")
	// ErrIllegalTransition: the caller asked for a transition the state machine does not allow.
	// Nothing was written. This is a bug in the caller.
	ErrIllegalTransition = errors.New("illegal transition")
	// ErrInvalid: an argument or a stored item is malformed.
	ErrInvalid = errors.New("invalid")
	// ErrNoIndex: the table lacks an index the query needs (a table created by an earlier version,
	// before the index was part of the schema; the provider warns about it at plan).
	ErrNoIndex = errors.New("index missing")
)

// ConflictError says what the record looked like when a conditional write lost.
type ConflictError struct {
	ID      string
	Want    string // what the write expected, e.g. "state=idle, no run id"
	Current State  // the state found; empty when the record could not be decoded
	RunID   string // the run id found
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("instance %s: conflict: expected %s, found state %q run %q", e.ID, e.Want, e.Current, e.RunID)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// classify maps an SDK error to the store's typed errors, keeping the original in the chain.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("%s: %w: %w", op, ErrConflict, err)
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
				return fmt.Errorf("%s: %w: %w", op, ErrConflict, err)
			}
		}
	}
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		return fmt.Errorf("%s: table: %w: %w: %w", op, ErrNoTable, ErrNotFound, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			return fmt.Errorf("%s: %w: %w", op, ErrThrottled, err)
		case "ValidationException":
			if strings.Contains(ae.ErrorMessage(), "specified index") {
				return fmt.Errorf("%s: %w: %w", op, ErrNoIndex, err)
			}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
