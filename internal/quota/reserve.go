// Reserving, settling and giving back units: each a transaction over the reservation item and the
// counters it names.
package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Reserve adds r.Amount to every limit's counter and writes the reservation, all or nothing. A
// limit with Max > 0 refuses when its counter would pass Max: the answer is a *RefusedError and
// nothing is written. Reserving an id that exists already (a retry whose first answer was lost, a
// repeated request) succeeds without counting again.
func (l *Ledger) Reserve(ctx context.Context, r Reservation, limits []Limit) error {
	if r.ID == "" || r.Amount <= 0 || len(limits) == 0 {
		return fmt.Errorf("reservation %q of %d units on %d counters: invalid", r.ID, r.Amount, len(limits))
	}
	for _, lim := range limits {
		if lim.Max > 0 && r.Amount > lim.Max {
			return l.refused(ctx, lim, r.Amount)
		}
	}
	now := l.o.Now()
	r.CreatedAt, r.Counters = now, nil
	for _, lim := range limits {
		r.Counters = append(r.Counters, lim.Counter)
	}
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: &l.table, Item: encodeReservation(r),
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}}
	for _, lim := range limits {
		items = append(items, types.TransactWriteItem{Update: l.addTo(lim, r.Amount, now)})
	}
	err := l.transact(writeReserve.Context(ctx), items)
	if err == nil {
		return nil
	}
	for _, i := range failedConditions(err) {
		if i == 0 {
			// The reservation exists: this reservation's own earlier write (or a repeated request
			// of the same owner). Either way it is counted once.
			if _, gerr := l.Reservation(ctx, r.ID); gerr == nil {
				return nil
			}
			continue
		}
		return l.refused(ctx, limits[i-1], r.Amount)
	}
	return fmt.Errorf("reserving %d units for %s: %w", r.Amount, r.ID, err)
}

// addTo is the counter update of a reservation: held += amount, within the limit if there is one.
func (l *Ledger) addTo(lim Limit, amount int, now time.Time) *types.Update {
	u := &types.Update{
		TableName:        &l.table,
		Key:              key(pkCounter, lim.Counter),
		UpdateExpression: aws.String("SET held = if_not_exists(held, :zero) + :n, updated_at = :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero": num(0), ":n": num(int64(amount)), ":now": num(now.UnixMilli()),
		},
	}
	if lim.Label != "" {
		*u.UpdateExpression += ", label = :label"
		u.ExpressionAttributeValues[":label"] = s(lim.Label)
	}
	if lim.Max > 0 {
		// held + amount <= Max, written as DynamoDB can compare: held <= Max - amount.
		u.ConditionExpression = aws.String("attribute_not_exists(held) OR held <= :room")
		u.ExpressionAttributeValues[":room"] = num(int64(lim.Max - amount))
	}
	return u
}

// refused reads the refusing counter for the answer and counts the refusal on it (refused: the
// dashboard's account; a lost count is no harm).
func (l *Ledger) refused(ctx context.Context, lim Limit, asked int) error {
	cur, err := l.Counter(ctx, lim.Counter)
	e := &RefusedError{Kind: lim.Kind, Counter: lim.Counter, Max: lim.Max, Current: cur, Asked: asked}
	_, _ = l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &l.table, Key: key(pkCounter, lim.Counter),
		UpdateExpression:          aws.String("SET refused = if_not_exists(refused, :zero) + :one, refused_at = :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0), ":one": num(1), ":now": num(l.o.Now().UnixMilli())},
	})
	if err != nil {
		return errors.Join(e, err)
	}
	return e
}

// Settle names the instances a reservation pays for (and gives back the units it reserved beyond
// them). A reservation Repair released already (its deadline passed) is ErrNotFound: the instances
// are then adopted by a later Repair.
func (l *Ledger) Settle(ctx context.Context, id string, instances []string) error {
	for range l.o.Attempts {
		r, err := l.Reservation(ctx, id)
		if err != nil {
			return err
		}
		err = l.adjust(ctx, r, min(r.Amount, len(instances)), instances)
		if !errors.Is(err, errChanged) {
			return err
		}
	}
	return fmt.Errorf("settling %s: %w", id, errChanged)
}

// Release gives back every unit of a reservation and deletes it. A reservation that is gone
// (released already) is not an error.
func (l *Ledger) Release(ctx context.Context, id string) error {
	for range l.o.Attempts {
		r, err := l.Reservation(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err = l.adjust(ctx, r, 0, nil); !errors.Is(err, errChanged) && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return fmt.Errorf("releasing %s: %w", id, errChanged)
}

var (
	// ErrNotFound is a reservation that does not exist.
	ErrNotFound = errors.New("reservation not found")
	// errChanged: the reservation changed since it was read (a concurrent recount); read again.
	errChanged = errors.New("reservation changed")
)

// adjust sets a reservation's amount to amount (deleting it at 0) and gives the difference back to
// its counters, on the condition that its amount is still the one read: a retried or concurrent
// adjustment never gives a unit back twice. instances, when not nil, settles it.
func (l *Ledger) adjust(ctx context.Context, r Reservation, amount int, instances []string) error {
	give := r.Amount - amount
	now := l.o.Now()
	vals := map[string]types.AttributeValue{":old": num(int64(r.Amount))}
	var first types.TransactWriteItem
	if amount == 0 {
		first.Delete = &types.Delete{TableName: &l.table, Key: key(pkReservation, r.ID),
			ConditionExpression: aws.String("amount = :old"), ExpressionAttributeValues: vals}
	} else {
		set := "SET amount = :new"
		vals[":new"] = num(int64(amount))
		if instances != nil {
			set += ", instances = :ids, settled = :t"
			vals[":ids"], vals[":t"] = strList(instances), &types.AttributeValueMemberBOOL{Value: true}
		}
		first.Update = &types.Update{TableName: &l.table, Key: key(pkReservation, r.ID), UpdateExpression: aws.String(set),
			ConditionExpression: aws.String("amount = :old"), ExpressionAttributeValues: vals}
	}
	items := []types.TransactWriteItem{first}
	if give != 0 {
		for _, c := range r.Counters {
			items = append(items, types.TransactWriteItem{Update: &types.Update{
				TableName: &l.table, Key: key(pkCounter, c),
				UpdateExpression:          aws.String("SET held = held - :n, updated_at = :now"),
				ConditionExpression:       aws.String("attribute_exists(held)"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":n": num(int64(give)), ":now": num(now.UnixMilli())},
			}})
		}
	}
	err := l.transact(writeAdjust.Context(ctx), items)
	if slices.Contains(failedConditions(err), 0) {
		return fmt.Errorf("adjusting %s: %w", r.ID, errChanged)
	}
	if err != nil {
		return fmt.Errorf("adjusting %s from %d to %d: %w", r.ID, r.Amount, amount, err)
	}
	return nil
}

// Reservation reads a reservation (strongly consistent).
func (l *Ledger) Reservation(ctx context.Context, id string) (Reservation, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: key(pkReservation, id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Reservation{}, fmt.Errorf("reading reservation %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return Reservation{}, fmt.Errorf("reservation %s: %w", id, ErrNotFound)
	}
	return decodeReservation(out.Item)
}

// Counter reads a counter (strongly consistent); a counter never written is 0.
func (l *Ledger) Counter(ctx context.Context, name string) (int, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: key(pkCounter, name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("reading counter %s: %w", name, err)
	}
	return int(intAttr(out.Item, "held")), nil
}

// CounterView is a counter as the operator sees it.
type CounterView struct {
	Name      string
	Label     string // a repository's owner/repo, when known
	Held      int
	Refused   int       // refusals it caused since it was first written
	RefusedAt time.Time // the last one
}

// Counters reads every counter (strongly consistent), sorted by name.
func (l *Ledger) Counters(ctx context.Context) ([]CounterView, error) {
	items, err := l.query(ctx, pkCounter)
	if err != nil {
		return nil, err
	}
	out := make([]CounterView, 0, len(items))
	for _, it := range items {
		v := CounterView{Name: strAttr(it, "sk"), Label: strAttr(it, "label"), Held: int(intAttr(it, "held")), Refused: int(intAttr(it, "refused"))}
		if ms := intAttr(it, "refused_at"); ms > 0 {
			v.RefusedAt = time.UnixMilli(ms)
		}
		out = append(out, v)
	}
	return out, nil
}

// Reservations lists every reservation (strongly consistent). An item that does not decode is
// skipped, never the listing's failure.
func (l *Ledger) Reservations(ctx context.Context) ([]Reservation, error) {
	items, err := l.query(ctx, pkReservation)
	if err != nil {
		return nil, err
	}
	out := make([]Reservation, 0, len(items))
	for _, it := range items {
		if r, err := decodeReservation(it); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func (l *Ledger) query(ctx context.Context, pk string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName: &l.table, KeyConditionExpression: aws.String("pk = :pk"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk)},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", pk, err)
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

func encodeReservation(r Reservation) map[string]types.AttributeValue {
	it := key(pkReservation, r.ID)
	it["amount"] = num(int64(r.Amount))
	it["counters"] = strList(r.Counters)
	it["created_at"] = num(r.CreatedAt.UnixMilli())
	it["deadline"] = num(r.Deadline.UnixMilli())
	if r.Run != "" {
		it["run"] = s(r.Run)
	}
	if r.Settled {
		it["settled"] = &types.AttributeValueMemberBOOL{Value: true}
		it["instances"] = strList(r.Instances)
	}
	return it
}

func decodeReservation(it map[string]types.AttributeValue) (Reservation, error) {
	r := Reservation{
		ID: strAttr(it, "sk"), Amount: int(intAttr(it, "amount")), Counters: strs(it["counters"]), Run: strAttr(it, "run"),
		Instances: strs(it["instances"]), CreatedAt: time.UnixMilli(intAttr(it, "created_at")), Deadline: time.UnixMilli(intAttr(it, "deadline")),
	}
	if b, ok := it["settled"].(*types.AttributeValueMemberBOOL); ok {
		r.Settled = b.Value
	}
	if r.ID == "" || r.Amount <= 0 || len(r.Counters) == 0 {
		return Reservation{}, fmt.Errorf("reservation %q: not a reservation item", r.ID)
	}
	return r, nil
}

func strList(v []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(v))
	for i, e := range v {
		l[i] = s(e)
	}
	return &types.AttributeValueMemberL{Value: l}
}

func strs(av types.AttributeValue) []string {
	l, ok := av.(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range l.Value {
		if v, ok := e.(*types.AttributeValueMemberS); ok {
			out = append(out, v.Value)
		}
	}
	return out
}

func strAttr(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func intAttr(it map[string]types.AttributeValue, name string) int64 {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}
