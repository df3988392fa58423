// The single-table layout and the encoding of items. An instance's items are in two partitions, one
// per author, so an IAM policy with dynamodb:LeadingKeys can confine an instance to its own items and
// tell who may write them:
//   - INSTANCE#<key>: what the control plane decides from (the instance record: state, run, scope,
//     thresholds, class, type; the per-claim credentials it hands out). Written by the reconciler
//     only; the instance role may only read them (GetItem).
//   - AGENT#<key>: what the agent reports (heartbeat, signals, acknowledgements; signals.go). The
//     only items the instance role may write.
//
// Attribute names are short and stable: they are the product's storage format.
package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Key attributes, index names and item kinds of the table.
const (
	attrPK = "pk"
	attrSK = "sk"

	// Index attributes are written only while they mean something, which keeps the indexes sparse:
	// idx_state is absent on terminated records, idx_run while there is no run, idx_pool outside pools,
	// idx_fit on records without a runner class or scope (and on terminated ones).
	attrIdxState  = "idx_state"
	attrIdxRun    = "idx_run"
	attrIdxPool   = "idx_pool"
	attrIdxFit    = "idx_fit"
	attrThreshold = "threshold"
	attrID        = "id"
	attrTTL       = "ttl"
	attrPooledAt  = "pooled_at"

	// IndexByState lists live records of one state ordered by threshold (refresh, pool counts).
	IndexByState = "by_state"
	// IndexByRun lists the records of one run (release, status, idempotent provision).
	IndexByRun = "by_run"
	// IndexByPool lists the live records of one warm pool (convergence).
	IndexByPool = "by_pool"
	// IndexByFit lists the live records of one runner class and scope in one state (selection: the
	// second look and the stopped-instance start read what fits the request, not the whole pool).
	IndexByFit = "by_fit"

	skInstance  = "STATE"
	skHeartbeat = "HEARTBEAT"
	skSignal    = "SIGNAL"
	skAck       = "ACK"
	skLease     = "LEASE"

	prefixInstance = "INSTANCE#"
	prefixAgent    = "AGENT#"
	prefixConfig   = "CONFIG#"
	prefixLease    = "LEASE#"

	// terminatedRetention is how long a terminated record stays for audit before TTL removes it.
	terminatedRetention = 7 * 24 * time.Hour
)

// InstancePK is the partition key of every item of an instance in a store without an instance key
// prefix (see WithInstanceKeyPrefix).
func InstancePK(id string) string { return prefixInstance + id }

// AgentPK is the partition key of the items an instance's agent writes (heartbeat, signals,
// acknowledgements) in a store without an instance key prefix.
func AgentPK(id string) string { return prefixAgent + id }

// InstanceARNPrefix is the instance key prefix of a deployment whose instance role confines every
// instance to its own items: the partition key of an instance's items is then
// INSTANCE#arn:PARTITION:ec2:REGION:ACCOUNT:instance/ID, which is exactly
// "INSTANCE#${ec2:SourceInstanceARN}" in the instance role's dynamodb:LeadingKeys condition.
func InstanceARNPrefix(region, account string) string {
	return fmt.Sprintf("arn:%s:ec2:%s:%s:instance/", PartitionOf(region), region, account)
}

// PartitionOf is the AWS partition of a region.
func PartitionOf(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	case strings.HasPrefix(region, "us-iso-"):
		return "aws-iso"
	case strings.HasPrefix(region, "us-isob-"):
		return "aws-iso-b"
	}
	return "aws"
}

// Instance is the record of one EC2 instance.
type Instance struct {
	ID            string
	State         State
	RunID         string    // the run that owns the instance; empty when none
	Threshold     time.Time // deadline of the current state
	UsageClass    string    // "spot" or "on-demand"
	InstanceType  string
	CPU           int // vCPUs
	MemoryMiB     int
	ResourceClass string
	RunnerClass   string
	Pool          string // warm pool name; empty for instances created by a provision
	Scope         string // repository or owner the instance may serve, e.g. "acme/api" or "acme"
	Zone          string
	SpecHash      string // hash of runner class, image and pool config (warm-pool rollouts)
	// RunnerVersion is the Actions runner version the instance was launched with (what its launch
	// template version's user data installs; "" when unknown): the control plane's record, used to
	// retire instances left behind by a new release.
	RunnerVersion string
	// JobAccess is the runner class's job_access when the instance was launched (its user data's
	// grant: a root class's sudoers drop-in stays on the instance), its default spelled out; empty:
	// not recorded (records older than d1b2421 and the replicas of that release, which wrote the
	// default as empty), retired from the pool by refresh. Written by the control plane at creation.
	JobAccess string
	Reason    string // why the last transition happened
	CreatedAt time.Time
	UpdatedAt time.Time
	Version   int64 // incremented by every write; lets tests and audits count transitions
	// PooledAt is when the control plane put the instance in the pool (MarkPooled, or a warm-up
	// that made it hot): after it verified the hand-back itself, never on the agent's word alone.
	// Every transition clears it, so a set PooledAt means "in the pool since then, untouched".
	PooledAt time.Time
	// AgentKey is the instance agent's public key, pinned by the control plane at the first
	// self-signed report it reads (Store.Attribute; attribution.go); empty until then. Signals that
	// decide something must be signed by it; the agent starts its runner only once it reads its own
	// key here, and no instance is pooled hot or promoted without one.
	AgentKey string
}

// Expired reports whether the record's threshold has passed at now.
func (in Instance) Expired(now time.Time) bool {
	return in.State.Live() && !in.Threshold.IsZero() && !now.Before(in.Threshold)
}

func sv(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func ms(t time.Time) types.AttributeValue { return n(t.UnixMilli()) }

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// instancePK is the partition key of an instance's control-plane items in this store.
func (s *Store) instancePK(id string) string { return prefixInstance + s.keyPrefix + id }

// agentPK is the partition key of the items an instance's agent writes in this store.
func (s *Store) agentPK(id string) string { return prefixAgent + s.keyPrefix + id }

// InstanceKey is the partition key of an instance's control-plane items in this store.
func (s *Store) InstanceKey(id string) string { return s.instancePK(id) }

// AgentKey is the partition key of the items the instance's agent writes in this store.
func (s *Store) AgentKey(id string) string { return s.agentPK(id) }

func (s *Store) instanceKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.instancePK(id)), attrSK: sv(skInstance)}
}

// encodeInstance renders a record as a full item, index attributes included.
func (s *Store) encodeInstance(in Instance) map[string]types.AttributeValue {
	item := s.instanceKey(in.ID)
	item[attrID] = sv(in.ID)
	item["state"] = sv(string(in.State))
	item["version"] = n(in.Version)
	item["created_at"] = ms(in.CreatedAt)
	item["updated_at"] = ms(in.UpdatedAt)
	if !in.Threshold.IsZero() {
		item[attrThreshold] = ms(in.Threshold)
	}
	if !in.PooledAt.IsZero() {
		item[attrPooledAt] = ms(in.PooledAt)
	}
	if in.State.Live() {
		item[attrIdxState] = sv(string(in.State))
		if in.Pool != "" {
			item[attrIdxPool] = sv(in.Pool)
		}
		if in.RunnerClass != "" && in.Scope != "" {
			item[attrIdxFit] = sv(FitKey(in.RunnerClass, in.Scope))
		}
	}
	if in.RunID != "" {
		item["run_id"] = sv(in.RunID)
		item[attrIdxRun] = sv(in.RunID)
	}
	for k, v := range map[string]string{
		"usage_class": in.UsageClass, "instance_type": in.InstanceType, "resource_class": in.ResourceClass,
		"runner_class": in.RunnerClass, "pool": in.Pool, "scope": in.Scope, "zone": in.Zone,
		"spec_hash": in.SpecHash, "reason": in.Reason, "runner_version": in.RunnerVersion, "job_access": in.JobAccess,
	} {
		if v != "" {
			item[k] = sv(v)
		}
	}
	if in.CPU != 0 {
		item["cpu"] = n(int64(in.CPU))
	}
	if in.MemoryMiB != 0 {
		item["memory_mib"] = n(int64(in.MemoryMiB))
	}
	return item
}

// decoder reads attributes of one item and remembers the first problem, so decoding code stays
// linear and a malformed item is one clear error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) str(name string) string {
	v, ok := d.item[name]
	if !ok {
		return ""
	}
	sv, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(fmt.Errorf("attribute %s: want a string, got %T", name, v))
		return ""
	}
	return sv.Value
}

func (d *decoder) num(name string) int64 {
	v, ok := d.item[name]
	if !ok {
		return 0
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(fmt.Errorf("attribute %s: want a number, got %T", name, v))
		return 0
	}
	i, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		d.fail(fmt.Errorf("attribute %s: %w", name, err))
	}
	return i
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// decodeInstance parses an instance item. A record with an unknown state or malformed attributes
// is an ErrInvalid error naming the item, never a zero value acted on as if it were valid.
func decodeInstance(item map[string]types.AttributeValue) (Instance, error) {
	d := &decoder{item: item}
	pk := d.str(attrPK)
	in := Instance{
		ID:            d.str(attrID),
		RunID:         d.str("run_id"),
		Threshold:     fromMS(d.num(attrThreshold)),
		UsageClass:    d.str("usage_class"),
		InstanceType:  d.str("instance_type"),
		CPU:           int(d.num("cpu")),
		MemoryMiB:     int(d.num("memory_mib")),
		ResourceClass: d.str("resource_class"),
		RunnerClass:   d.str("runner_class"),
		Pool:          d.str("pool"),
		Scope:         d.str("scope"),
		Zone:          d.str("zone"),
		SpecHash:      d.str("spec_hash"),
		RunnerVersion: d.str("runner_version"),
		JobAccess:     d.str("job_access"),
		Reason:        d.str("reason"),
		CreatedAt:     fromMS(d.num("created_at")),
		UpdatedAt:     fromMS(d.num("updated_at")),
		Version:       d.num("version"),
		PooledAt:      fromMS(d.num(attrPooledAt)),
		AgentKey:      d.str(attrAgentKey),
	}
	st, err := ParseState(d.str("state"))
	if err != nil {
		d.fail(err)
	}
	in.State = st
	// The key is INSTANCE#<prefix><id>; the prefix (an ARN's, or none) is the store's business.
	if in.ID == "" || !strings.HasPrefix(pk, prefixInstance) || !strings.HasSuffix(pk, in.ID) {
		d.fail(fmt.Errorf("id %q does not match key %q", in.ID, pk))
	}
	if d.err != nil {
		return Instance{}, fmt.Errorf("decoding instance item %s: %w: %w", strings.TrimPrefix(pk, prefixInstance), ErrInvalid, d.err)
	}
	return in, nil
}

// FitKey is the by_fit index key of a runner class and a scope: GitHub owner and repository names
// are case-insensitive, so the scope is folded to lower case.
func FitKey(runnerClass, scope string) string {
	return runnerClass + "#" + strings.ToLower(scope)
}
