package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDBAPI is the part of the DynamoDB client the store uses; *dynamodb.Client satisfies it.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// Store reads and writes one runnerpool state table.
type Store struct {
	db        DynamoDBAPI
	table     string
	now       func() time.Time
	keyPrefix string // between INSTANCE# and the instance id in instance keys
	foreign   *foreignItems
}

// Option configures a Store.
type Option func(*Store)

// WithClock injects the clock used for thresholds, heartbeats and leases.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithInstanceKeyPrefix puts prefix between INSTANCE# and the instance id in the partition key of
// every instance item. With InstanceARNPrefix(region, account) the key is the instance's ARN, which an
// IAM policy can match exactly ("INSTANCE#${ec2:SourceInstanceARN}"), so an instance role can be
// confined to the instance's own items. Every component of a deployment (reconciler, agents,
// provider) must use the same prefix.
func WithInstanceKeyPrefix(prefix string) Option { return func(s *Store) { s.keyPrefix = prefix } }

// New returns a store over the named table.
func New(db DynamoDBAPI, table string, opts ...Option) *Store {
	st := &Store{db: db, table: table, now: time.Now, foreign: &foreignItems{}}
	for _, o := range opts {
		o(st)
	}
	return st
}

// Table is the name of the table the store works on.
func (s *Store) Table() string { return s.table }

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.now() }

// Create writes a new instance record in an initial state (created or warming). It fails with
// ErrConflict if a record with that id exists already, so a retried create never resets a record.
func (s *Store) Create(ctx context.Context, in Instance) (Instance, error) {
	if err := validateID(in.ID); err != nil {
		return Instance{}, err
	}
	if !slicesContains(InitialStates, in.State) {
		return Instance{}, fmt.Errorf("creating instance %s in state %q: %w", in.ID, in.State, ErrIllegalTransition)
	}
	now := s.now()
	in.CreatedAt, in.UpdatedAt, in.Version = now, now, 1
	item, token := s.encodeInstance(in), newWriteToken()
	item[attrWrite] = sv(token)
	_, err := s.db.PutItem(writeInstanceCreate.Context(ctx), &dynamodb.PutItemInput{
		TableName:                           &s.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil && !isOwnWrite(err, token) {
		return Instance{}, classify("creating instance "+in.ID, err)
	}
	return in, nil
}

// Get reads an instance record with a strongly consistent read.
func (s *Store) Get(ctx context.Context, id string) (Instance, error) {
	if err := validateID(id); err != nil {
		return Instance{}, err
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: s.instanceKey(id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Instance{}, classify("reading instance "+id, err)
	}
	if len(out.Item) == 0 {
		return Instance{}, fmt.Errorf("instance %s: %w", id, ErrNotFound)
	}
	return decodeInstance(out.Item)
}

// Change describes one conditional state transition.
type Change struct {
	// From lists the states the record may be in; the write fails with ErrConflict otherwise.
	From []State
	// To is the new state. Every From -> To must be legal, or nothing is written.
	To State
	// RunID, when set, must equal the record's run id.
	RunID string
	// RequireNoRun requires the record to have no run id (claims: "idle and run id empty").
	RequireNoRun bool
	// SetRunID sets the run id (nil leaves it; a pointer to "" clears it).
	SetRunID *string
	// Threshold is the deadline of the new state; zero leaves the threshold as it is.
	Threshold time.Time
	// ExpiredAt, when set, requires the record's threshold to have passed at that time (refresh's
	// conditional mark: a record renewed since it was read is not terminated).
	ExpiredAt time.Time
	// LiveAt, when set, requires the record's threshold to still be ahead of that time: a claim
	// never takes an instance whose idle deadline passed or that a failed release expired, even if
	// a stale pool message still names it.
	LiveAt time.Time
	// Reason is recorded on the item (why the transition happened).
	Reason string
	// SetScope, when set, replaces the record's scope (a release narrows a pooled instance to the
	// repository of the run it served, from the control plane's run record).
	SetScope string
	// RunnerClass is the record's runner class, required with SetScope: the by_fit index key (class
	// and scope) follows the scope in the same write.
	RunnerClass string
	// MarkPooled marks the record pooled by the control plane (see Instance.PooledAt) in the same
	// write; without it the transition clears the mark.
	MarkPooled bool
	// RequirePooled requires the control plane's pool mark on the record (ClaimPooled): a pool
	// message is only a hint, and one left from an earlier pooling of the instance (a claim through
	// the second look, a delete lost in a crash) must not hand over an instance whose release the
	// control plane has not verified yet.
	RequirePooled bool
	// PooledAt, with RequirePooled, requires that very mark (ClaimPooledAt): the claim of a message
	// that announces one pooling fails against a later pooling of the same instance.
	PooledAt time.Time
}

// Transition applies a conditional state change and returns the record as written.
func (s *Store) Transition(ctx context.Context, id string, c Change) (Instance, error) {
	if err := checkChange(id, c); err != nil {
		return Instance{}, err
	}
	u := newUpdate(s.now())
	c.apply(u)
	cond, want := c.condition(u)
	return s.update(transitionWrite(c).Context(ctx), id, u, cond, want)
}

// checkChange refuses a change of instance id that no record could take: a bad id, no source
// state, a transition the state machine forbids, or fields that contradict each other.
func checkChange(id string, c Change) error {
	if err := validateID(id); err != nil {
		return err
	}
	if len(c.From) == 0 {
		return fmt.Errorf("instance %s: transition to %s with no source state: %w", id, c.To, ErrIllegalTransition)
	}
	for _, f := range c.From {
		if !CanTransition(f, c.To) {
			return fmt.Errorf("instance %s: %s -> %s: %w", id, f, c.To, ErrIllegalTransition)
		}
	}
	if c.RequireNoRun && c.RunID != "" {
		return fmt.Errorf("instance %s: a change cannot both require no run and run %q: %w", id, c.RunID, ErrInvalid)
	}
	if c.SetScope != "" && c.RunnerClass == "" {
		return fmt.Errorf("instance %s: a new scope without the runner class: %w", id, ErrInvalid)
	}
	return nil
}

// apply sets what the change writes on u: the state, the pool mark, the index keys, the run id,
// the threshold, the reason and the scope.
func (c Change) apply(u *update) {
	u.set("state", sv(string(c.To)))
	// A state change takes the instance out of the pool as far as the control plane is concerned;
	// only a change that itself pools it (a warm-up making it hot) marks it again.
	if c.MarkPooled {
		u.set(attrPooledAt, ms(u.now))
	} else {
		u.remove(attrPooledAt)
	}
	if c.To.Live() {
		u.set(attrIdxState, sv(string(c.To)))
	} else {
		// Terminated records leave every index and expire from the table after the audit period.
		u.remove(attrIdxState, attrIdxPool, attrIdxRun, attrIdxFit)
		u.set(attrTTL, n(u.now.Add(terminatedRetention).Unix()))
	}
	if c.SetRunID != nil {
		if *c.SetRunID == "" {
			u.remove("run_id", attrIdxRun)
		} else {
			u.set("run_id", sv(*c.SetRunID))
			if c.To.Live() {
				u.set(attrIdxRun, sv(*c.SetRunID))
			}
		}
	}
	if !c.Threshold.IsZero() {
		u.set(attrThreshold, ms(c.Threshold))
	}
	if c.Reason != "" {
		u.set("reason", sv(c.Reason))
	}
	if c.SetScope != "" {
		u.set("scope", sv(c.SetScope))
		if c.To.Live() {
			u.set(attrIdxFit, sv(FitKey(c.RunnerClass, c.SetScope)))
		}
	}
}

// condition is the change's write condition on u, and want, what it requires in words (for the
// conflict's message).
func (c Change) condition(u *update) (cond, want string) {
	states := make([]string, len(c.From))
	for i, f := range c.From {
		states[i] = u.value(sv(string(f)))
	}
	conds := []string{"attribute_exists(pk)", "#state IN (" + strings.Join(states, ", ") + ")"}
	u.names["#state"] = "state"
	want = fmt.Sprintf("state in %v", c.From)
	if c.RunID != "" {
		conds = append(conds, "run_id = "+u.value(sv(c.RunID)))
		want += ", run " + c.RunID
	}
	if c.RequireNoRun {
		conds = append(conds, "attribute_not_exists(run_id)")
		want += ", no run id"
	}
	if !c.ExpiredAt.IsZero() {
		conds = append(conds, "#threshold <= "+u.value(ms(c.ExpiredAt)))
		u.names["#threshold"] = attrThreshold
		want += ", threshold passed"
	}
	if c.RequirePooled && c.PooledAt.IsZero() {
		conds = append(conds, "attribute_exists("+attrPooledAt+")")
		want += ", marked pooled"
	}
	if c.RequirePooled && !c.PooledAt.IsZero() {
		conds = append(conds, attrPooledAt+" = "+u.value(ms(c.PooledAt)))
		want += ", marked pooled at " + c.PooledAt.UTC().Format(time.RFC3339Nano)
	}
	if !c.LiveAt.IsZero() {
		conds = append(conds, "#threshold > "+u.value(ms(c.LiveAt)))
		u.names["#threshold"] = attrThreshold
		want += ", threshold ahead"
	}
	return strings.Join(conds, " AND "), want
}

// Claim is the atomic idle -> claimed hand-over: it succeeds only if the record is in one of from
// (idle when none is given), has no run id and has not expired, and sets the run id and the claim
// deadline.
func (s *Store) Claim(ctx context.Context, id, runID string, threshold time.Time, from ...State) (Instance, error) {
	return s.claim(ctx, id, runID, threshold, false, time.Time{}, from)
}

// ClaimPooled is Claim of an instance the control plane put in the pool itself: the record must also
// carry the pool mark (MarkPooled, or a warm-up into a pool). It is the claim of a pool candidate,
// whose message may be stale: a record idle again after a later run, but whose release has not been
// verified yet, is refused.
func (s *Store) ClaimPooled(ctx context.Context, id, runID string, threshold time.Time, from ...State) (Instance, error) {
	return s.claim(ctx, id, runID, threshold, true, time.Time{}, from)
}

// ClaimPooledAt is ClaimPooled of the pooling marked at pooledAt (a pool message's
// pool.Message.PooledAt): a message left from an earlier pooling of the instance, now pooled
// again, is refused with a *ConflictError showing the record idle (zero pooledAt: any mark).
func (s *Store) ClaimPooledAt(ctx context.Context, id, runID string, pooledAt, threshold time.Time, from ...State) (Instance, error) {
	return s.claim(ctx, id, runID, threshold, true, pooledAt, from)
}

func (s *Store) claim(ctx context.Context, id, runID string, threshold time.Time, pooled bool, pooledAt time.Time, from []State) (Instance, error) {
	if runID == "" {
		return Instance{}, fmt.Errorf("claiming instance %s: empty run id: %w", id, ErrInvalid)
	}
	if len(from) == 0 {
		from = []State{StateIdle}
	}
	return s.Transition(ctx, id, Change{
		From: from, To: StateClaimed, RequireNoRun: true, RequirePooled: pooled, PooledAt: pooledAt, SetRunID: &runID, LiveAt: s.now(),
		Threshold: threshold, Reason: "claimed by run " + runID,
	})
}

// MarkPooled records that the control plane put an idle instance in the pool after it verified the
// hand-back itself (the agent's signal and GitHub's list of runners): the record must still be idle,
// without a run, and within its threshold. Selection's second look and refresh's re-pooling act on
// this mark, never on what the instance's agent wrote.
func (s *Store) MarkPooled(ctx context.Context, id string) (Instance, error) {
	if err := validateID(id); err != nil {
		return Instance{}, err
	}
	u := newUpdate(s.now())
	u.set(attrPooledAt, ms(u.now))
	u.names["#state"] = "state"
	u.names["#threshold"] = attrThreshold
	cond := "attribute_exists(pk) AND #state = " + u.value(sv(string(StateIdle))) +
		" AND attribute_not_exists(run_id) AND #threshold > " + u.value(ms(u.now))
	return s.update(writeInstanceMarkPooled.Context(ctx), id, u, cond, "idle, no run id, threshold ahead")
}

// Expire moves a live record's threshold to now without changing its state, so refresh (and the
// instance itself) terminate it. When runID is set the record must still belong to that run.
func (s *Store) Expire(ctx context.Context, id, runID, reason string) (Instance, error) {
	return s.expire(ctx, id, runID, false, reason)
}

// ExpireNoRun is Expire of a record that names no run (a hand-back that cleared the run id but
// could not pool the instance): a run that claimed it meanwhile keeps it, and once it is expired
// no claim can follow (claims require a threshold ahead).
func (s *Store) ExpireNoRun(ctx context.Context, id, reason string) (Instance, error) {
	return s.expire(ctx, id, "", true, reason)
}

func (s *Store) expire(ctx context.Context, id, runID string, noRun bool, reason string) (Instance, error) {
	if err := validateID(id); err != nil {
		return Instance{}, err
	}
	u := newUpdate(s.now())
	u.set(attrThreshold, ms(u.now))
	u.set("reason", sv(reason))
	u.names["#state"] = "state"
	cond := "attribute_exists(pk) AND #state <> " + u.value(sv(string(StateTerminated)))
	want := "a live record"
	switch {
	case runID != "":
		cond += " AND run_id = " + u.value(sv(runID))
		want += " of run " + runID
	case noRun:
		cond += " AND attribute_not_exists(run_id)"
		want += " of no run"
	}
	return s.update(writeInstanceExpire.Context(ctx), id, u, cond, want)
}

// update runs one conditional UpdateItem and turns a failed condition into ErrNotFound or a
// *ConflictError describing the record that won; a failed condition against its own applied write
// (written.go) is the success it was.
func (s *Store) update(ctx context.Context, id string, u *update, cond, want string) (Instance, error) {
	token := newWriteToken()
	u.set(attrWrite, sv(token))
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.table,
		Key:                                 s.instanceKey(id),
		UpdateExpression:                    aws.String(u.expression()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            u.names,
		ExpressionAttributeValues:           u.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if item, own := ownWrite(err, token); own {
		return decodeInstance(item)
	}
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if len(ccf.Item) == 0 {
				return Instance{}, fmt.Errorf("instance %s: %w", id, ErrNotFound)
			}
			ce := &ConflictError{ID: id, Want: want}
			if cur, derr := decodeInstance(ccf.Item); derr == nil {
				ce.Current, ce.RunID = cur.State, cur.RunID
			}
			return Instance{}, ce
		}
		return Instance{}, classify("updating instance "+id, err)
	}
	return decodeInstance(out.Attributes)
}

// ByRun lists the records of a run (live and terminated ones still in the table).
func (s *Store) ByRun(ctx context.Context, runID string) ([]Instance, error) {
	if runID == "" {
		return nil, fmt.Errorf("listing by run: empty run id: %w", ErrInvalid)
	}
	return s.queryInstances(ctx, "by run "+runID, &dynamodb.QueryInput{
		IndexName:                 aws.String(IndexByRun),
		KeyConditionExpression:    aws.String("idx_run = :r"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": sv(runID)},
	})
}

// ByState lists live records in one state. When expiredAt is set, only those whose threshold has
// passed at that time are returned (refresh's query; the index is ordered by threshold).
func (s *Store) ByState(ctx context.Context, state State, expiredAt time.Time) ([]Instance, error) {
	in, err := byStateQuery(state, expiredAt)
	if err != nil {
		return nil, err
	}
	return s.queryInstances(ctx, "by state "+string(state), in)
}

// byStateQuery is the query of the by_state index for one live state (and, when expiredAt is set,
// thresholds passed at that time).
func byStateQuery(state State, expiredAt time.Time) (*dynamodb.QueryInput, error) {
	if !state.Live() {
		return nil, fmt.Errorf("listing by state %q: only live states are indexed: %w", state, ErrInvalid)
	}
	in := &dynamodb.QueryInput{
		IndexName:                 aws.String(IndexByState),
		KeyConditionExpression:    aws.String("idx_state = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": sv(string(state))},
	}
	if !expiredAt.IsZero() {
		in.KeyConditionExpression = aws.String("idx_state = :s AND #t <= :t")
		in.ExpressionAttributeNames = map[string]string{"#t": attrThreshold}
		in.ExpressionAttributeValues[":t"] = ms(expiredAt)
	}
	return in, nil
}

// Fitting lists the live records of a runner class and scope in one state, through the by_fit
// index: what a selection for a request of that class and scope can use, and nothing else.
func (s *Store) Fitting(ctx context.Context, state State, runnerClass, scope string) ([]Instance, error) {
	if !state.Live() || runnerClass == "" || scope == "" {
		return nil, fmt.Errorf("listing %s records of class %q, scope %q: a live state, a class and a scope are required: %w", state, runnerClass, scope, ErrInvalid)
	}
	return s.queryInstances(ctx, "of "+runnerClass+" for "+scope+" "+string(state), &dynamodb.QueryInput{
		IndexName:                 aws.String(IndexByFit),
		KeyConditionExpression:    aws.String("idx_fit = :f AND idx_state = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": sv(FitKey(runnerClass, scope)), ":s": sv(string(state))},
	})
}

// FittingIn is Fitting for several states in one query per call: the by_fit index's sort key is the
// state, so one key condition spans the states' names (BETWEEN the first and the last) and what
// lies between them in another state is dropped here. Selection's second look reads idle and ready
// records (nothing sorts between "idle" and "ready") in one query instead of two.
func (s *Store) FittingIn(ctx context.Context, states []State, runnerClass, scope string) ([]Instance, error) {
	if len(states) == 0 || runnerClass == "" || scope == "" {
		return nil, fmt.Errorf("listing records of class %q, scope %q in %v: states, a class and a scope are required: %w", runnerClass, scope, states, ErrInvalid)
	}
	lo, hi := states[0], states[0]
	for _, st := range states {
		if !st.Live() {
			return nil, fmt.Errorf("listing records in state %q: only live states are indexed: %w", st, ErrInvalid)
		}
		lo, hi = min(lo, st), max(hi, st)
	}
	recs, err := s.queryInstances(ctx, fmt.Sprintf("of %s for %s in %v", runnerClass, scope, states), &dynamodb.QueryInput{
		IndexName:              aws.String(IndexByFit),
		KeyConditionExpression: aws.String("idx_fit = :f AND idx_state BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":f": sv(FitKey(runnerClass, scope)), ":lo": sv(string(lo)), ":hi": sv(string(hi)),
		},
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(recs, func(in Instance) bool { return !slices.Contains(states, in.State) }), nil
}

// Live lists every live record, one indexed query per live state.
func (s *Store) Live(ctx context.Context) ([]Instance, error) {
	var all []Instance
	for _, st := range LiveStates {
		got, err := s.ByState(ctx, st, time.Time{})
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
	}
	return all, nil
}

// Expired lists every live record whose threshold has passed at now.
func (s *Store) Expired(ctx context.Context, now time.Time) ([]Instance, error) {
	var all []Instance
	for _, st := range LiveStates {
		got, err := s.ByState(ctx, st, now)
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
	}
	return all, nil
}

// ByPool lists the live records of a warm pool.
func (s *Store) ByPool(ctx context.Context, pool string) ([]Instance, error) {
	if pool == "" {
		return nil, fmt.Errorf("listing by pool: empty pool name: %w", ErrInvalid)
	}
	return s.queryInstances(ctx, "by pool "+pool, &dynamodb.QueryInput{
		IndexName:                 aws.String(IndexByPool),
		KeyConditionExpression:    aws.String("idx_pool = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv(pool)},
	})
}

// queryInstances runs a query of an index over all pages. Index reads are eventually consistent in
// DynamoDB: callers that act on a record re-check it with a conditional write, never on the listing
// alone. An item that is not a control-plane record never fails the listing: it is skipped and
// counted (foreign.go).
func (s *Store) queryInstances(ctx context.Context, what string, in *dynamodb.QueryInput) ([]Instance, error) {
	return s.queryInstancesUpTo(ctx, what, in, 0)
}

// queryInstancesUpTo is queryInstances stopping once it has n records (0: all of them).
func (s *Store) queryInstancesUpTo(ctx context.Context, what string, in *dynamodb.QueryInput, n int) ([]Instance, error) {
	in.TableName = &s.table
	index := aws.ToString(in.IndexName)
	controlPlaneOnly(in)
	if n > 0 {
		in.Limit = aws.Int32(int32(min(n, 1000)))
	}
	var out []Instance
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() && (n <= 0 || len(out) < n) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing instances "+what, err)
		}
		recs, _ := s.decodeListed(ctx, index, page.Items, page.ScannedCount-page.Count)
		out = append(out, recs...)
	}
	return out, nil
}

// decodeListed decodes a page of a listing, and returns the items it decoded alongside. An item
// that is not a control-plane record is skipped and counted (foreign.go), as are the filtered ones
// (filtered: the page's ScannedCount - Count).
func (s *Store) decodeListed(ctx context.Context, index string, items []map[string]types.AttributeValue, filtered int32) ([]Instance, []map[string]types.AttributeValue) {
	skipped := int(filtered)
	out, kept := make([]Instance, 0, len(items)), make([]map[string]types.AttributeValue, 0, len(items))
	for _, item := range items {
		inst, err := decodeInstance(item)
		if err != nil {
			skipped++
			s.foreign.logOnce(ctx, index, itemKey(item), err)
			continue
		}
		out, kept = append(out, inst), append(kept, item)
	}
	s.foreign.skipped(index, skipped)
	return out, kept
}

// itemKey renders an item's primary key for a log line.
func itemKey(item map[string]types.AttributeValue) string {
	d := &decoder{item: item}
	return d.str(attrPK) + " " + d.str(attrSK)
}

func validateID(id string) error {
	if id == "" || len(id) > 128 || strings.ContainsAny(id, "# \t\n") {
		return fmt.Errorf("instance id %q: %w", id, ErrInvalid)
	}
	return nil
}

func slicesContains[T comparable](xs []T, x T) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// update builds an UpdateExpression with placeholder names, always bumping version and updated_at.
type update struct {
	now     time.Time
	sets    []string
	removes []string
	removed []string // attribute names already removed, so no path is named twice
	names   map[string]string
	values  map[string]types.AttributeValue
}

func newUpdate(now time.Time) *update {
	u := &update{now: now, names: map[string]string{}, values: map[string]types.AttributeValue{}}
	u.set("updated_at", ms(now))
	u.sets = append(u.sets, "#version = if_not_exists(#version, "+u.value(n(0))+") + "+u.value(n(1)))
	u.names["#version"] = "version"
	return u
}

func (u *update) value(v types.AttributeValue) string {
	name := fmt.Sprintf(":v%d", len(u.values))
	u.values[name] = v
	return name
}

func (u *update) set(attr string, v types.AttributeValue) {
	name := "#a" + fmt.Sprint(len(u.names))
	u.names[name] = attr
	u.sets = append(u.sets, name+" = "+u.value(v))
}

func (u *update) remove(attrs ...string) {
	for _, a := range attrs {
		if slicesContains(u.removed, a) {
			continue
		}
		u.removed = append(u.removed, a)
		name := "#a" + fmt.Sprint(len(u.names))
		u.names[name] = a
		u.removes = append(u.removes, name)
	}
}

func (u *update) expression() string {
	e := "SET " + strings.Join(u.sets, ", ")
	if len(u.removes) > 0 {
		e += " REMOVE " + strings.Join(u.removes, ", ")
	}
	return e
}
