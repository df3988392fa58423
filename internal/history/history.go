// Package history keeps what the dashboard, `runnerpool status --cost` and the cost metrics show
// and the live records do not: one entry per provision (what was selected, started or created,
// how long each step took, when the run released its runners and how), and a sample of every
// warm pool and runner class per sampling interval. It lives in the state table under keys of its
// own, every item carries a TTL, and every read is a Query on a partition key (one partition per
// UTC day): never a Scan, so its cost is bounded by what is shown, not by the table's size.
//
// Layout (pk / sk):
//
//	HISTORY#RUNS#2026-11-25  / 1764072000123#<run key>   one provision and its release
//	HISTORY#POOLS#2026-11-25 / 1764072000000             every pool's counts at one sample
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
)

// DynamoDBAPI is the part of the DynamoDB client history uses; *dynamodb.Client satisfies it.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// writeSample is the history's one conditional write (internal/condwrite).
var writeSample = condwrite.Declare("history sample")

const (
	prefixRuns  = "HISTORY#RUNS#"
	prefixPools = "HISTORY#POOLS#"
	dayLayout   = "2006-01-02"
)

// ErrNotFound is returned when history has no entry for that run.
var ErrNotFound = errors.New("not in history")

// Sources of a runner (as the provision reports them).
const (
	SourceReused  = "reused"
	SourceStarted = "started"
	SourceCreated = "created"
)

// Runner is one runner a provision handed to its run.
type Runner struct {
	InstanceID   string `json:"id"`
	InstanceType string `json:"type"`
	UsageClass   string `json:"usage"`
	Zone         string `json:"zone,omitempty"`
	Source       string `json:"source"`
	Pool         string `json:"pool,omitempty"`
	// Released is what the release did with it ("pooled", "expired", ...); empty until released.
	Released string `json:"released,omitempty"`
}

// Steps are the durations of a provision's steps, in the order they run.
type Steps struct {
	Select   time.Duration `json:"select"`
	Start    time.Duration `json:"start"`
	Create   time.Duration `json:"create"`
	Register time.Duration `json:"register"` // the fleet validation: started and created runners registering
	Post     time.Duration `json:"post"`
	Total    time.Duration `json:"total"`
}

// Provision is what the recorder learns when a provision returns.
type Provision struct {
	RunKey      string
	Repository  string
	RunID       string
	Attempt     int
	RunnerClass string
	StartedAt   time.Time // the run record's creation: the provision's start
	FinishedAt  time.Time
	Status      string // succeeded or failed
	Outcome     string // on failure: unsuccessful or dump
	Error       string
	Runners     []Runner
	Steps       Steps
}

// Release is what the recorder learns when a release returns.
type Release struct {
	RunKey     string
	StartedAt  time.Time // the provision's start (locates the entry)
	ReleaseAt  time.Time // when the release began
	FinishedAt time.Time
	Outcomes   map[string]string // instance id -> outcome
	Message    string
}

// Run is one history entry: a provision and, once released, its release.
type Run struct {
	Provision
	ReleaseAt   time.Time
	ReleasedAt  time.Time
	ReleaseNote string
}

// Released reports whether the run's release has been recorded.
func (r Run) Released() bool { return !r.ReleasedAt.IsZero() }

// PoolCount is one warm pool's (or, with Pool empty, one runner class's non-pool instances')
// state at a sample.
type PoolCount struct {
	RunnerClass string         `json:"class"`
	Pool        string         `json:"pool,omitempty"`
	Schedule    string         `json:"schedule,omitempty"`
	TargetHot   int            `json:"target_hot"`
	TargetStop  int            `json:"target_stopped"`
	NextChange  time.Time      `json:"next_change,omitzero"`
	NextHot     int            `json:"next_hot"`
	NextStopped int            `json:"next_stopped"`
	States      map[string]int `json:"states"`
	// Billed counts the instances EC2 bills for compute (every live state but stopped), by
	// "instance type/usage class".
	Billed map[string]int `json:"billed,omitempty"`
	// Autoscale is an autoscaled pool's last decision, read when the dashboard's pools page is
	// drawn; never kept in samples.
	Autoscale *PoolAutoscale `json:"-"`
}

// PoolAutoscale is what an autoscaled warm pool's last decision shows beside its target and
// counts: the demand forecast, the schedule window's maxima, the measured queue time against the
// goal, any conflict with the bounds or the budget, and the reasons.
type PoolAutoscale struct {
	DecidedAt                time.Time
	Forecast                 float64 // jobs per minute
	WindowHot, WindowStopped int
	Goal, QueueP95           time.Duration
	QueueJobs                int // jobs QueueP95 is the p95 of (0: none measured in the last hour)
	Conflict                 string
	Reasons                  []string
}

// Missed reports whether the measured queue time is above the goal.
func (a PoolAutoscale) Missed() bool { return a.QueueJobs > 0 && a.QueueP95 > a.Goal }

// Sample is every pool's counts at one moment.
type Sample struct {
	At    time.Time   `json:"-"`
	Pools []PoolCount `json:"pools"`
}

// Options configure a Store.
type Options struct {
	// Retention is how long a run entry stays (TTL); default 30 days, like run records.
	Retention time.Duration
	// SampleRetention is how long a pool sample stays; default 8 days (the cost page's longest window).
	SampleRetention time.Duration
	// SampleInterval is the pool sampling interval; default 5 minutes.
	SampleInterval time.Duration
	Now            func() time.Time
}

// Store reads and writes history items in the state table.
type Store struct {
	db    DynamoDBAPI
	table string
	o     Options
}

// New returns a Store over the state table.
func New(db DynamoDBAPI, table string, o Options) *Store {
	if o.Retention <= 0 {
		o.Retention = 30 * 24 * time.Hour
	}
	if o.SampleRetention <= 0 {
		o.SampleRetention = 8 * 24 * time.Hour
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, table: table, o: o}
}

// Retention is how long run entries are kept.
func (s *Store) Retention() time.Duration { return s.o.Retention }

// SampleInterval is the pool sampling interval.
func (s *Store) SampleInterval() time.Duration { return s.o.SampleInterval }

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.o.Now() }

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func nv(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func day(t time.Time) string { return t.UTC().Format(dayLayout) }

func runSK(startedAt time.Time, key string) string {
	return fmt.Sprintf("%013d#%s", startedAt.UnixMilli(), key)
}

func runItemKey(startedAt time.Time, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": sv(prefixRuns + day(startedAt)), "sk": sv(runSK(startedAt, key))}
}

// provisionDoc is the stored form of a Provision (one JSON attribute: the layout of the
// dashboard's data can grow without a schema).
type provisionDoc struct {
	Repository  string    `json:"repository,omitempty"`
	RunID       string    `json:"run_id,omitempty"`
	Attempt     int       `json:"attempt,omitempty"`
	RunnerClass string    `json:"class,omitempty"`
	FinishedAt  time.Time `json:"finished_at"`
	Status      string    `json:"status"`
	Outcome     string    `json:"outcome,omitempty"`
	Error       string    `json:"error,omitempty"`
	Runners     []Runner  `json:"runners,omitempty"`
	Steps       Steps     `json:"steps"`
}

type releaseDoc struct {
	ReleaseAt  time.Time         `json:"release_at"`
	FinishedAt time.Time         `json:"finished_at"`
	Outcomes   map[string]string `json:"outcomes,omitempty"`
	Message    string            `json:"message,omitempty"`
}

func validKey(key string) error {
	if key == "" || len(key) > 512 || strings.ContainsAny(key, "\n\t#") {
		return fmt.Errorf("history: run key %q: empty, too long or with a reserved character", key)
	}
	return nil
}

// RecordProvision writes (or rewrites, for a repeated provision of the same run) the entry of a
// provision. It never touches the release part, so it and RecordRelease may land in any order.
func (s *Store) RecordProvision(ctx context.Context, p Provision) error {
	if err := validKey(p.RunKey); err != nil {
		return err
	}
	doc, err := json.Marshal(provisionDoc{
		Repository: p.Repository, RunID: p.RunID, Attempt: p.Attempt, RunnerClass: p.RunnerClass, FinishedAt: p.FinishedAt.UTC(),
		Status: p.Status, Outcome: p.Outcome, Error: p.Error, Runners: p.Runners, Steps: p.Steps,
	})
	if err != nil {
		return fmt.Errorf("history: encoding provision of %s: %w", p.RunKey, err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.table,
		Key:                      runItemKey(p.StartedAt, p.RunKey),
		UpdateExpression:         aws.String("SET run_key = :k, started_at = :s, prov = :p, #ttl = :t"),
		ExpressionAttributeNames: map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":k": sv(p.RunKey), ":s": nv(p.StartedAt.UnixMilli()), ":p": sv(string(doc)),
			":t": nv(p.StartedAt.Add(s.o.Retention).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("history: recording provision of %s: %w", p.RunKey, err)
	}
	return nil
}

// RecordRelease adds a release to a run's entry (a repeated release replaces the last one).
func (s *Store) RecordRelease(ctx context.Context, r Release) error {
	if err := validKey(r.RunKey); err != nil {
		return err
	}
	doc, err := json.Marshal(releaseDoc{ReleaseAt: r.ReleaseAt.UTC(), FinishedAt: r.FinishedAt.UTC(), Outcomes: r.Outcomes, Message: r.Message})
	if err != nil {
		return fmt.Errorf("history: encoding release of %s: %w", r.RunKey, err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.table,
		Key:                      runItemKey(r.StartedAt, r.RunKey),
		UpdateExpression:         aws.String("SET run_key = :k, started_at = :s, rel = :r, #ttl = :t"),
		ExpressionAttributeNames: map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":k": sv(r.RunKey), ":s": nv(r.StartedAt.UnixMilli()), ":r": sv(string(doc)),
			":t": nv(r.StartedAt.Add(s.o.Retention).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("history: recording release of %s: %w", r.RunKey, err)
	}
	return nil
}

func decodeRun(item map[string]types.AttributeValue) (Run, error) {
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	var r Run
	r.RunKey = str("run_key")
	if v, ok := item["started_at"].(*types.AttributeValueMemberN); ok {
		ms, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return Run{}, fmt.Errorf("history entry %s: started_at: %w", r.RunKey, err)
		}
		r.StartedAt = time.UnixMilli(ms).UTC()
	}
	if p := str("prov"); p != "" {
		var d provisionDoc
		if err := json.Unmarshal([]byte(p), &d); err != nil {
			return Run{}, fmt.Errorf("history entry %s: provision: %w", r.RunKey, err)
		}
		r.Repository, r.RunID, r.Attempt, r.RunnerClass = d.Repository, d.RunID, d.Attempt, d.RunnerClass
		r.FinishedAt, r.Status, r.Outcome, r.Error, r.Runners, r.Steps = d.FinishedAt, d.Status, d.Outcome, d.Error, d.Runners, d.Steps
	}
	if p := str("rel"); p != "" {
		var d releaseDoc
		if err := json.Unmarshal([]byte(p), &d); err != nil {
			return Run{}, fmt.Errorf("history entry %s: release: %w", r.RunKey, err)
		}
		r.ReleaseAt, r.ReleasedAt, r.ReleaseNote = d.ReleaseAt, d.FinishedAt, d.Message
		for i := range r.Runners {
			r.Runners[i].Released = d.Outcomes[r.Runners[i].InstanceID]
		}
	}
	if r.RunKey == "" {
		return Run{}, errors.New("history entry without a run key")
	}
	return r, nil
}

// GetRun reads one run's entry; startedAt is the provision's start (the run record's creation).
func (s *Store) GetRun(ctx context.Context, key string, startedAt time.Time) (Run, error) {
	if err := validKey(key); err != nil {
		return Run{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: runItemKey(startedAt, key)})
	if err != nil {
		return Run{}, fmt.Errorf("history: reading run %s: %w", key, err)
	}
	if len(out.Item) == 0 {
		return Run{}, fmt.Errorf("history: run %s: %w", key, ErrNotFound)
	}
	return decodeRun(out.Item)
}

// maxDaysAtOnce bounds the day partitions a window's read queries at once.
const maxDaysAtOnce = 4

// RecentRuns lists up to limit entries started in [from, to), newest first: one Query per UTC day
// (newest day first), stopping as soon as limit entries are read. Without a limit (the cost
// report's whole window) the days are read at once, each independent of the others.
func (s *Store) RecentRuns(ctx context.Context, from, to time.Time, limit int) ([]Run, error) {
	var days []time.Time
	for d := to.UTC().Truncate(24 * time.Hour); !d.Before(from.UTC().Truncate(24 * time.Hour)); d = d.Add(-24 * time.Hour) {
		days = append(days, d)
	}
	if limit <= 0 {
		return eachDay(ctx, days, func(ctx context.Context, d time.Time) ([]Run, error) { return s.runsOfDay(ctx, d, from, to, 0) })
	}
	var out []Run
	for _, d := range days {
		got, err := s.runsOfDay(ctx, d, from, to, limit-len(out))
		if err != nil {
			return nil, err
		}
		if out = append(out, got...); len(out) >= limit {
			return out[:limit], nil
		}
	}
	return out, nil
}

// eachDay reads the days at once (at most maxDaysAtOnce) and returns what each read, in the
// days' order.
func eachDay[T any](ctx context.Context, days []time.Time, read func(context.Context, time.Time) ([]T, error)) ([]T, error) {
	per := make([][]T, len(days))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxDaysAtOnce)
	for i, d := range days {
		g.Go(func() (err error) {
			per[i], err = read(gctx, d)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(per...), nil
}

// runsOfDay lists up to limit (0: all) entries of day d's partition started in [from, to), newest
// first.
func (s *Store) runsOfDay(ctx context.Context, d, from, to time.Time, limit int) ([]Run, error) {
	in := &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": sv(prefixRuns + day(d)),
			":a":  sv(fmt.Sprintf("%013d#", from.UnixMilli())),
			":b":  sv(fmt.Sprintf("%013d#", to.UnixMilli())),
		},
		ScanIndexForward: aws.Bool(false),
	}
	var out []Run
	// Not a QueryPaginator: it fixes Limit when it is made, and each request must ask for what is
	// still missing (without a Limit, a page of 100 runs read the day's first MB).
	for {
		if limit > 0 {
			in.Limit = aws.Int32(int32(min(limit-len(out), 1000)))
		}
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("history: listing runs of %s: %w", day(d), err)
		}
		for _, it := range page.Items {
			r, err := decodeRun(it)
			if err != nil {
				return nil, fmt.Errorf("history: %w", err)
			}
			out = append(out, r)
		}
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if in.ExclusiveStartKey = page.LastEvaluatedKey; in.ExclusiveStartKey == nil {
			return out, nil
		}
	}
}

// RecordSample writes a pool sample for the sampling interval that contains at. Only the first
// writer of an interval wins (a conditional put), so several replicas, or a leader change within
// an interval, never double a sample; recorded is false when the interval had one already.
func (s *Store) RecordSample(ctx context.Context, at time.Time, pools []PoolCount) (recorded bool, _ error) {
	bucket := at.UTC().Truncate(s.o.SampleInterval)
	doc, err := json.Marshal(Sample{Pools: pools})
	if err != nil {
		return false, fmt.Errorf("history: encoding pool sample: %w", err)
	}
	_, err = s.db.PutItem(writeSample.Context(ctx), &dynamodb.PutItemInput{
		TableName: &s.table,
		Item: map[string]types.AttributeValue{
			"pk": sv(prefixPools + day(bucket)), "sk": sv(fmt.Sprintf("%013d", bucket.UnixMilli())),
			"at": nv(at.UnixMilli()), "pools": sv(string(doc)), "ttl": nv(bucket.Add(s.o.SampleRetention).Unix()),
		},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("history: recording pool sample: %w", err)
	}
	return true, nil
}

// HasSample reports whether the interval containing at has its sample (one strongly consistent
// GetItem, projected to the key, so a follower of the leader's sampling costs half a read unit).
func (s *Store) HasSample(ctx context.Context, at time.Time) (bool, error) {
	bucket := at.UTC().Truncate(s.o.SampleInterval)
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table,
		Key: map[string]types.AttributeValue{
			"pk": sv(prefixPools + day(bucket)), "sk": sv(fmt.Sprintf("%013d", bucket.UnixMilli())),
		},
		ProjectionExpression: aws.String("pk"),
	})
	if err != nil {
		return false, fmt.Errorf("history: reading pool sample: %w", err)
	}
	return len(out.Item) > 0, nil
}

// Samples lists the pool samples taken in [from, to), oldest first: one Query per UTC day, the
// days read at once.
func (s *Store) Samples(ctx context.Context, from, to time.Time) ([]Sample, error) {
	var days []time.Time
	for d := from.UTC().Truncate(24 * time.Hour); d.Before(to); d = d.Add(24 * time.Hour) {
		days = append(days, d)
	}
	return eachDay(ctx, days, func(ctx context.Context, d time.Time) ([]Sample, error) { return s.samplesOfDay(ctx, d, from, to) })
}

// samplesOfDay lists day d's pool samples taken in [from, to), oldest first.
func (s *Store) samplesOfDay(ctx context.Context, d, from, to time.Time) ([]Sample, error) {
	var out []Sample
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": sv(prefixPools + day(d)),
			":a":  sv(fmt.Sprintf("%013d", from.UnixMilli())),
			":b":  sv(fmt.Sprintf("%013d", to.UnixMilli()-1)),
		},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("history: listing pool samples of %s: %w", day(d), err)
		}
		for _, it := range page.Items {
			smp, err := decodeSample(it)
			if err != nil {
				return nil, err
			}
			out = append(out, smp)
		}
	}
	return out, nil
}

// LatestSample is the newest pool sample taken at or before at, in at's UTC day or the day before:
// one Query of at's day, newest first and limited to one item, and one of the day before when at's
// day has none yet. ErrNotFound when there is none (sampling off, or stopped for a day). What it costs does
// not depend on how many instances the samples counted.
func (s *Store) LatestSample(ctx context.Context, at time.Time) (Sample, error) {
	for _, d := range []time.Time{at, at.Add(-24 * time.Hour)} {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.table,
			KeyConditionExpression: aws.String("pk = :pk AND sk <= :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": sv(prefixPools + day(d)), ":b": sv(fmt.Sprintf("%013d", at.UnixMilli())),
			},
			ScanIndexForward: aws.Bool(false),
			Limit:            aws.Int32(1),
		})
		if err != nil {
			return Sample{}, fmt.Errorf("history: reading the latest pool sample of %s: %w", day(d), err)
		}
		if len(out.Items) > 0 {
			return decodeSample(out.Items[0])
		}
	}
	return Sample{}, fmt.Errorf("history: no pool sample on the day of %s or the day before: %w", at.UTC().Format(time.RFC3339), ErrNotFound)
}

// decodeSample reads a pool sample item.
func decodeSample(it map[string]types.AttributeValue) (Sample, error) {
	var smp Sample
	ps, _ := it["pools"].(*types.AttributeValueMemberS)
	at, _ := it["at"].(*types.AttributeValueMemberN)
	if ps == nil || at == nil {
		return Sample{}, errors.New("history: pool sample without pools or time")
	}
	if err := json.Unmarshal([]byte(ps.Value), &smp); err != nil {
		return Sample{}, fmt.Errorf("history: pool sample: %w", err)
	}
	ms, err := strconv.ParseInt(at.Value, 10, 64)
	if err != nil {
		return Sample{}, fmt.Errorf("history: pool sample time: %w", err)
	}
	smp.At = time.UnixMilli(ms).UTC()
	return smp, nil
}

// Counts sums a sample's state counts over its pools and runner classes: every live record of the
// deployment by state, as the sample counted them.
func (s Sample) Counts() map[string]int {
	out := map[string]int{}
	for _, p := range s.Pools {
		for st, n := range p.States {
			out[st] += n
		}
	}
	return out
}
