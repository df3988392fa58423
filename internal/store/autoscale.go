// autoscale.go: one item per autoscaled warm pool, written by the leader once per convergence pass:
// the pool's recorded demand (the autoscale profile's compact encoding), the minute being counted,
// what the policy decided last (the hysteresis state a new leader continues from) and why (for
// status, metrics and the dashboard on any replica). Only the reconciler writes it.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
)

const (
	prefixAutoscale = "AUTOSCALE#"
	skAutoscale     = "STATE"
)

var writeAutoscale = condwrite.Declare("autoscale state put")

// AutoscaleState is a pool's autoscale item.
type AutoscaleState struct {
	Pool string
	// Profile is autoscale.Profile.Encode() of the demand recorded so far.
	Profile string
	// Minute is the minute whose arrivals Count holds (recorded into Profile once it is over).
	Minute time.Time
	Count  int
	// Hot, Stopped and LowFor are the last decision's targets and hysteresis state.
	Hot, Stopped int
	LowFor       time.Duration
	DecidedAt    time.Time
	// HalvedAt is when the profile's half-life was last applied (zero: never; the next write
	// starts its clock): a new leader ages the profile from where the last one left it.
	HalvedAt time.Time
	// Starts are the pool's recent measured start times in milliseconds by where the instance
	// came from ("hot", "stopped", "cold"), newest last: the leader's measurements, kept so a new
	// leader continues from them.
	Starts map[string][]int64
	// QueueTimes are the pool's jobs' measured queue times (a job's creation at GitHub to its
	// runner's registration) of the recent past, oldest first, each dated by the decision that took
	// it in: what status, the dashboard and the metrics compare with the goal.
	QueueTimes []QueueTime
	// Runs is the leader's encoding of the pool's workflow runs in progress and the fan-outs
	// learned from its completed ones (warmpool's autoscale runs), opaque here.
	Runs     string
	Decision AutoscaleDecision
	Version  int64 // incremented by every write
}

// AutoscaleDecision is what the last decision saw and why it chose its targets.
type AutoscaleDecision struct {
	Forecast      float64 `json:"forecast"` // jobs per minute expected in the slot
	Level         int     `json:"level"`
	WindowHot     int     `json:"window_hot"`
	WindowStopped int     `json:"window_stopped"`
	Arrived       int     `json:"arrived"`
	Waiting       int     `json:"waiting"`
	InFlight      int     `json:"in_flight"`
	// Queued is how many of Waiting are jobs the ledger holds unserved; ScaleSetWaiting what the
	// scale sets' statistics count as waiting (Waiting takes the larger of the two views per set).
	Queued          int `json:"queued,omitempty"`
	ScaleSetWaiting int `json:"scale_set_waiting,omitempty"`
	// Runs is how many workflow runs were in progress in the pool's jobs; Fanouts how many
	// workflows' fan-outs were learned from its completed runs; Prewarm how many hot instances
	// the decision asked for the fan-outs of runs in progress (within its bounds).
	Runs     int      `json:"runs,omitempty"`
	Fanouts  int      `json:"fanouts,omitempty"`
	Prewarm  int      `json:"prewarm,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`
	Conflict string   `json:"conflict,omitempty"`
	// The start times (milliseconds) and prices (USD per hour) the decision used, and where each
	// came from (warmpool's autoscale inputs: measured or default, price file or default).
	HotStartMS     int64   `json:"hot_start_ms,omitempty"`
	StoppedStartMS int64   `json:"stopped_start_ms,omitempty"`
	ColdStartMS    int64   `json:"cold_start_ms,omitempty"`
	StartsFrom     string  `json:"starts_from,omitempty"`
	HotPerHour     float64 `json:"hot_per_hour,omitempty"`
	StoppedPerHour float64 `json:"stopped_per_hour,omitempty"`
	PricesFrom     string  `json:"prices_from,omitempty"`
	// GoalMS is the pool's queue-time goal (its p95); QueueP95MS the p95 of the QueueJobs queue
	// times measured in the recent past (none: 0 jobs).
	GoalMS     int64 `json:"goal_ms,omitempty"`
	QueueP95MS int64 `json:"queue_p95_ms,omitempty"`
	QueueJobs  int   `json:"queue_jobs,omitempty"`
}

// QueueTime is one job's measured queue time.
type QueueTime struct {
	At   time.Time
	Wait time.Duration
}

// encodeQueueTimes renders queue times compactly: [[at unix ms, wait ms], ...].
func encodeQueueTimes(qs []QueueTime) (string, error) {
	out := make([][2]int64, len(qs))
	for i, q := range qs {
		out[i] = [2]int64{q.At.UnixMilli(), q.Wait.Milliseconds()}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func decodeQueueTimes(js string) ([]QueueTime, error) {
	var raw [][2]int64
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		return nil, fmt.Errorf("queue times: %w", err)
	}
	out := make([]QueueTime, len(raw))
	for i, r := range raw {
		if r[1] < 0 {
			return nil, fmt.Errorf("queue time %d ms: negative", r[1])
		}
		out[i] = QueueTime{At: fromMS(r[0]), Wait: time.Duration(r[1]) * time.Millisecond}
	}
	return out, nil
}

func autoscaleKey(pool string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixAutoscale + pool), attrSK: sv(skAutoscale)}
}

// GetAutoscale reads a pool's autoscale item (ErrNotFound when none).
func (s *Store) GetAutoscale(ctx context.Context, pool string) (AutoscaleState, error) {
	item, err := s.getItem(ctx, "autoscale state of "+pool, autoscaleKey(pool))
	if err != nil {
		return AutoscaleState{}, err
	}
	d := &decoder{item: item}
	st := AutoscaleState{
		Pool: pool, Profile: d.str("profile"), Runs: d.str("runs"), Minute: fromMS(d.num("minute")), Count: int(d.num("count")),
		Hot: int(d.num("hot")), Stopped: int(d.num("stopped")), LowFor: time.Duration(d.num("low_for_ms")) * time.Millisecond,
		DecidedAt: fromMS(d.num("decided_at")), HalvedAt: fromMS(d.num("halved_at")), Version: d.num("version"),
	}
	if js := d.str("decision"); d.err == nil && js != "" {
		d.err = json.Unmarshal([]byte(js), &st.Decision)
	}
	if js := d.str("starts"); d.err == nil && js != "" {
		d.err = json.Unmarshal([]byte(js), &st.Starts)
	}
	if js := d.str("queue_times"); d.err == nil && js != "" {
		st.QueueTimes, d.err = decodeQueueTimes(js)
	}
	if d.err == nil && (st.Count < 0 || st.Hot < 0 || st.Stopped < 0 || st.LowFor < 0) {
		d.err = errors.New("negative count or target")
	}
	if d.err != nil {
		return AutoscaleState{}, fmt.Errorf("autoscale state of %s: %w: %w", pool, ErrInvalid, d.err)
	}
	return st, nil
}

// PutAutoscale writes st if the stored item is still at expectVersion (0: must not exist), and
// returns it at its new version. ErrConflict: another writer (a previous leader) wrote meanwhile.
func (s *Store) PutAutoscale(ctx context.Context, st AutoscaleState, expectVersion int64) (AutoscaleState, error) {
	js, err := json.Marshal(st.Decision)
	if err != nil {
		return AutoscaleState{}, fmt.Errorf("autoscale state of %s: %w", st.Pool, err)
	}
	st.Version = expectVersion + 1
	item := autoscaleKey(st.Pool)
	item["profile"], item["minute"], item["count"] = sv(st.Profile), ms(st.Minute), n(int64(st.Count))
	item["hot"], item["stopped"], item["low_for_ms"] = n(int64(st.Hot)), n(int64(st.Stopped)), n(st.LowFor.Milliseconds())
	item["decided_at"], item["decision"], item["version"] = ms(st.DecidedAt), sv(string(js)), n(st.Version)
	if !st.HalvedAt.IsZero() {
		item["halved_at"] = ms(st.HalvedAt)
	}
	if st.Runs != "" {
		item["runs"] = sv(st.Runs)
	}
	if len(st.Starts) > 0 {
		starts, err := json.Marshal(st.Starts)
		if err != nil {
			return AutoscaleState{}, fmt.Errorf("autoscale state of %s: %w", st.Pool, err)
		}
		item["starts"] = sv(string(starts))
	}
	if len(st.QueueTimes) > 0 {
		qs, err := encodeQueueTimes(st.QueueTimes)
		if err != nil {
			return AutoscaleState{}, fmt.Errorf("autoscale state of %s: %w", st.Pool, err)
		}
		item["queue_times"] = sv(qs)
	}
	token := newWriteToken()
	item[attrWrite] = sv(token)
	in := &dynamodb.PutItemInput{
		TableName: &s.table, Item: item,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if expectVersion == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("version = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": n(expectVersion)}
	}
	if _, err := s.db.PutItem(writeAutoscale.Context(ctx), in); err != nil && !isOwnWrite(err, token) {
		return AutoscaleState{}, classify("writing the autoscale state of "+st.Pool, err)
	}
	return st, nil
}
