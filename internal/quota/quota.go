// Package quota enforces the deployment's limits (the concurrent runners of one repository, the
// instances of the deployment and of each runner class) with counters in the state table that only
// a conditional transaction changes: never a read, then a decision, then a write, so any number of
// replicas deciding at once never exceed a limit together.
//
// Every unit counted belongs to a reservation, an item of its own written in the same transaction
// as the counters it adds to. The reservation makes the write idempotent (the SDK retries a call
// whose answer was lost after it was applied: the retry finds its own reservation and succeeds
// without counting twice) and says how to give the units back:
//   - pending: reserved before the work it pays for (a provision, a fleet) and not settled yet. A
//     pending reservation past its deadline is settled by Repair on what it pays for (a run's: the
//     run's live records; a fleet's: nothing, its instances are adopted): its owner crashed
//     between reserving and launching, or never settled.
//   - settled: it names the instances it pays for, and (for a repository's runners) the run they
//     must serve. Recount gives back the units of the instances that no longer hold: terminated,
//     or released to the pool (a pooled idle instance is the deployment's, not a repository's).
//
// A decrement is a transaction too, conditional on the reservation's amount as read, so a retried
// or concurrent recount never gives back a unit twice. Repair (refresh) recounts every reservation
// from the instance records, releases pending ones past their deadline, adopts live instances no
// reservation pays for into the instance counters, and resets a counter that drifted from the sum
// of its reservations: a lost decrement never leaks capacity for longer than one refresh.
//
// Layout: counters are items QUOTA#COUNTER / <counter name> (attribute held); reservations are
// items QUOTA#RESERVATION / <id>. Neither carries an index attribute.
package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDBAPI is the part of the DynamoDB client the ledger uses; *dynamodb.Client satisfies it.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Limit kinds, as the API's 429 answer and the refusal metric name them.
const (
	LimitRepository  = "repository_runners"
	LimitDeployment  = "deployment_instances"
	LimitRunnerClass = "runner_class_instances"
)

// DeploymentCounter counts the deployment's instances.
const DeploymentCounter = "deployment"

// RepositoryCounter counts the runners held by the runs of one repository (by its GitHub id).
func RepositoryCounter(repositoryID string) string { return "repository#" + repositoryID }

// ClassCounter counts the instances of one runner class.
func ClassCounter(class string) string { return "class#" + class }

// ParseCounter says which limit a counter serves and what it counts: ("deployment_instances",
// ""), ("runner_class_instances", class) or ("repository_runners", repository id); ok is false
// for a name of no counter.
func ParseCounter(name string) (kind, scope string, ok bool) {
	if name == DeploymentCounter {
		return LimitDeployment, "", true
	}
	if c, found := strings.CutPrefix(name, "class#"); found {
		return LimitRunnerClass, c, true
	}
	if r, found := strings.CutPrefix(name, "repository#"); found {
		return LimitRepository, r, true
	}
	return "", "", false
}

// Limit is one counter a reservation adds to, with its maximum (0: counted, not limited).
type Limit struct {
	Kind    string // LimitRepository, LimitDeployment or LimitRunnerClass
	Counter string
	Max     int
	// Label, when set, is written on the counter for the operator (a repository's owner/repo).
	Label string
}

// ErrRefused is a reservation that would take a counter past its limit; nothing was written.
var ErrRefused = errors.New("quota exceeded")

// RefusedError says which limit refused a reservation.
type RefusedError struct {
	Kind    string
	Counter string
	Max     int
	Current int // the counter as read after the refusal
	Asked   int
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: %s limit %d, %d in use, %d asked", ErrRefused, e.Kind, e.Max, e.Current, e.Asked)
}

// Public is the refusal as the caller may read it: the limit, and the count only of the caller's
// own repository (an instance cap's count is every repository's usage).
func (e *RefusedError) Public() string {
	switch e.Kind {
	case LimitRepository:
		return fmt.Sprintf("%s: this repository's runs hold %d of the %d runners it may hold at once; the provision asked for %d", ErrRefused, e.Current, e.Max, e.Asked)
	case LimitRunnerClass:
		return fmt.Sprintf("%s: runner class %s's cap of %d instances leaves no room for %d more", ErrRefused, strings.TrimPrefix(e.Counter, "class#"), e.Max, e.Asked)
	}
	return fmt.Sprintf("%s: the deployment's cap of %d instances leaves no room for %d more", ErrRefused, e.Max, e.Asked)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Reservation is a number of units held on some counters.
type Reservation struct {
	ID       string
	Amount   int
	Counters []string
	// Run, when set, is the run the reservation's instances must serve to hold their unit (a
	// repository's runners); otherwise a live instance holds it (instance caps).
	Run string
	// Instances are the instances the units pay for; set when the reservation is settled.
	Instances []string
	Settled   bool
	// Deadline: a pending reservation past it is released by Repair.
	Deadline  time.Time
	CreatedAt time.Time
}

// Options configure a Ledger.
type Options struct {
	Now func() time.Time
	// Attempts bounds the tries of a transaction that conflicts with another one on the same
	// counter (TransactionConflict; the SDK does not retry it). Default 12.
	Attempts int
}

// Ledger reads and writes counters and reservations in one state table.
type Ledger struct {
	db    DynamoDBAPI
	table string
	o     Options
}

// New returns a Ledger over the table.
func New(db DynamoDBAPI, table string, o Options) *Ledger {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Attempts <= 0 {
		o.Attempts = 12
	}
	return &Ledger{db: db, table: table, o: o}
}

const (
	pkCounter     = "QUOTA#COUNTER"
	pkReservation = "QUOTA#RESERVATION"
)

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// transact runs a transaction, trying again (jittered) while it only conflicts with another
// transaction on the same items. Any other cancellation is returned for the caller to read.
func (l *Ledger) transact(ctx context.Context, items []types.TransactWriteItem) error {
	var err error
	for attempt := range l.o.Attempts {
		if attempt > 0 {
			d := time.Duration(min(attempt, 6)) * time.Duration(10+rand.IntN(30)) * time.Millisecond
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(d):
			}
		}
		_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if !conflictOnly(err) {
			return err
		}
	}
	return fmt.Errorf("after %d tries: %w", l.o.Attempts, err)
}

// conflictOnly: a transaction cancelled only because another transaction held one of its items.
func conflictOnly(err error) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		var tip *types.TransactionInProgressException
		return errors.As(err, &tip)
	}
	conflict := false
	for _, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "", "None":
		case "TransactionConflict":
			conflict = true
		default:
			return false
		}
	}
	return conflict
}

// failedConditions are the indexes of a cancelled transaction's items whose condition failed.
func failedConditions(err error) []int {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil
	}
	var out []int
	for i, r := range tce.CancellationReasons {
		if aws.ToString(r.Code) == "ConditionalCheckFailed" {
			out = append(out, i)
		}
	}
	return out
}
