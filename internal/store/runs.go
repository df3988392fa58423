// Run records and per-claim credentials.
//
// A run record makes a provision idempotent: the first provision of a run (repository id, run id,
// attempt) creates it, and asking again finds it and returns the same runners instead of a second
// set. It also carries what GET /v1/runs/{id} reports: what was selected, created, released, when
// and why.
//
// A credential item is what an instance agent needs to register (or remove) a runner for one claim:
// written by the control plane to the instance's control-plane partition, read by the agent (it may
// not delete it: the instance role only reads INSTANCE# items), and withdrawn by the control plane
// once the agent reported on it (TakeCredential) or by its TTL at GitHub's expiry. The agent marks
// its use with an acknowledgement in its own partition (Ack). No long-lived GitHub credential ever
// reaches an instance.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	prefixRun    = "RUN#"
	skRun        = "RUN"
	skCredential = "CREDENTIAL"
	runRetention = 30 * 24 * time.Hour
)

// Run is the record of one workflow run's provision (and later release).
type Run struct {
	Key          string // RunKey(...): repository id, run id and attempt
	RepositoryID string
	Repository   string // owner/name, for display
	RunID        string
	Attempt      int
	// Event is the event that started the run, from the provision's verified OIDC token
	// (event_name): it decides the trust level of the pool scope its release uses
	// (pool.RunScope). Empty on a record written before it was kept, or by a pool job; the
	// release then treats the run as untrusted.
	Event string
	// Ref, BaseRef and DefaultBranch are the run's git ref ("refs/heads/feature",
	// "refs/pull/7/merge"), a pull request's base branch and the repository's default branch, as
	// the control plane learnt them (the provision's verified OIDC token: ref and base_ref; a pool
	// job's webhook where it says them): the run's cache scope (cache.ScopeOf). Empty when unknown;
	// a run without a ref gets no cache of the deployment's.
	Ref, BaseRef, DefaultBranch string
	Status                      string          // free-form status owned by the provision orchestrator
	Request                     json.RawMessage // the provision request as accepted
	Result                      json.RawMessage // what was provisioned, released, undone
	CreatedAt                   time.Time
	UpdatedAt                   time.Time
	Version                     int64
	// WaitingIn, while set, lists the run among the jobs in progress of that warm pool (PoolJobs):
	// the pool job ledger sets it on a job not yet completed. Written, never read back: every write
	// says it again.
	WaitingIn string
	// ServedAttempt, when set, is a later attempt of the run whose re-run jobs ask for this
	// attempt's label (RunLabel): its provision ran again for them (provision.ServeRerun), and
	// the release of that attempt ends what it holds. Zero: the record serves its own Attempt.
	ServedAttempt int
	// Workflow is the workflow of a pool job's run, as its source said it (the workflow_job
	// webhook's workflow_name, a scale set job message's workflow file): what the autoscaler learns
	// fan-outs by. Empty when unknown.
	Workflow string
}

// RunKey is the idempotency key of a provision: one per repository, run and attempt.
func RunKey(repositoryID, runID string, attempt int) string {
	return fmt.Sprintf("%s:%s:%d", repositoryID, runID, attempt)
}

// RunLabel is the GitHub runner label of a run attempt's runners: "<run id>-<attempt>", what a
// job names with `runs-on: ${{ github.run_id }}-${{ github.run_attempt }}`. Each attempt has its
// own, so a re-run's jobs never land on an earlier attempt's runners.
func RunLabel(runID string, attempt int) string {
	return fmt.Sprintf("%s-%d", runID, attempt)
}

// AttemptOfLabel returns the attempt a runner label names for run runID (RunLabel), or 0 when the
// label is not one of that run's: "<run id>-<attempt>", both decimal, the attempt from 1.
func AttemptOfLabel(label, runID string) int {
	rest, ok := strings.CutPrefix(label, runID+"-")
	if !ok || runID == "" || rest == "" || len(rest) > 4 || rest[0] == '0' {
		return 0
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func runKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixRun + key), attrSK: sv(skRun)}
}

// CreateRun writes a new run record. If one exists already it is returned with created=false and
// nothing is written: the caller serves the existing provision instead of starting another.
func (s *Store) CreateRun(ctx context.Context, r Run) (_ Run, created bool, _ error) {
	if r.Key == "" || strings.ContainsAny(r.Key, "\n\t") {
		return Run{}, false, fmt.Errorf("run key %q: %w", r.Key, ErrInvalid)
	}
	now := s.now()
	r.CreatedAt, r.UpdatedAt, r.Version = now, now, 1
	item, token := encodeRun(r), newWriteToken()
	item[attrWrite] = sv(token)
	_, err := s.db.PutItem(writeRunCreate.Context(ctx), &dynamodb.PutItemInput{
		TableName:                           &s.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil || isOwnWrite(err, token) {
		// A failed condition against this call's own applied write is the creation it was.
		return r, true, nil
	}
	if err = classify("creating run "+r.Key, err); !isConflict(err) {
		return Run{}, false, err
	}
	existing, gerr := s.GetRun(ctx, r.Key)
	if gerr != nil {
		return Run{}, false, gerr
	}
	return existing, false, nil
}

// UpdateRun replaces a run's status and result if its version is still expectVersion.
func (s *Store) UpdateRun(ctx context.Context, r Run, expectVersion int64) (Run, error) {
	r.UpdatedAt = s.now()
	r.Version = expectVersion + 1
	item, token := encodeRun(r), newWriteToken()
	item[attrWrite] = sv(token)
	_, err := s.db.PutItem(writeRunUpdate.Context(ctx), &dynamodb.PutItemInput{
		TableName:                           &s.table,
		Item:                                item,
		ConditionExpression:                 aws.String("version = :v"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":v": n(expectVersion)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil && !isOwnWrite(err, token) {
		return Run{}, classify("updating run "+r.Key, err)
	}
	return r, nil
}

// RenewRun moves a run record's updated_at to now if its version is still version, without changing
// anything else (the version included): the holder of a lease judged by updated_at (a pool job
// being served) renews it while its work runs, and its next UpdateRun still matches. A record
// written since (another version) is ErrConflict: the holder lost it. Repeating a renewal is
// harmless, so a retry after a lost answer needs no write token.
func (s *Store) RenewRun(ctx context.Context, key string, version int64) error {
	now := s.now()
	_, err := s.db.UpdateItem(writeRunRenew.Context(ctx), &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       runKey(key),
		UpdateExpression:          aws.String("SET updated_at = :now, #ttl = :ttl"),
		ConditionExpression:       aws.String("version = :v"),
		ExpressionAttributeNames:  map[string]string{"#ttl": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": ms(now), ":ttl": n(now.Add(runRetention).Unix()), ":v": n(version)},
	})
	return classify("renewing run "+key, err)
}

// GetRun reads a run record.
func (s *Store) GetRun(ctx context.Context, key string) (Run, error) {
	item, err := s.getItem(ctx, "run "+key, runKey(key))
	if err != nil {
		return Run{}, err
	}
	d := &decoder{item: item}
	r := Run{
		Key: key, RepositoryID: d.str("repository_id"), Repository: d.str("repository"), RunID: d.str("run_id"),
		Attempt: int(d.num("attempt")), ServedAttempt: int(d.num("served_attempt")), Event: d.str("event"), Ref: d.str("ref"), BaseRef: d.str("base_ref"), DefaultBranch: d.str("default_branch"), Status: d.str("status"), Workflow: d.str("workflow"),
		CreatedAt: fromMS(d.num("created_at")), UpdatedAt: fromMS(d.num("updated_at")), Version: d.num("version"),
	}
	if v := d.str("request"); v != "" {
		r.Request = json.RawMessage(v)
	}
	if v := d.str("result"); v != "" {
		r.Result = json.RawMessage(v)
	}
	if d.err != nil {
		return Run{}, fmt.Errorf("run %s: %w: %w", key, ErrInvalid, d.err)
	}
	return r, nil
}

func encodeRun(r Run) map[string]types.AttributeValue {
	item := runKey(r.Key)
	item["repository_id"] = sv(r.RepositoryID)
	item["run_id"] = sv(r.RunID)
	item["attempt"] = n(int64(r.Attempt))
	item["version"] = n(r.Version)
	if r.ServedAttempt > 0 {
		item["served_attempt"] = n(int64(r.ServedAttempt))
	}
	item["created_at"] = ms(r.CreatedAt)
	item["updated_at"] = ms(r.UpdatedAt)
	item[attrTTL] = n(r.UpdatedAt.Add(runRetention).Unix())
	if r.WaitingIn != "" {
		item[attrIdxPool], item[attrID] = sv(prefixWaiting+r.WaitingIn), sv(r.Key)
	}
	for k, v := range map[string]string{"repository": r.Repository, "event": r.Event, "ref": r.Ref, "base_ref": r.BaseRef, "default_branch": r.DefaultBranch, "status": r.Status, "request": string(r.Request), "result": string(r.Result), "workflow": r.Workflow} {
		if v != "" {
			item[k] = sv(v)
		}
	}
	return item
}

// CredentialKind says what a credential is for.
type CredentialKind string

// The kinds of credential an agent may receive.
const (
	CredentialRegistration CredentialKind = "registration" // register a runner for a run
	CredentialRemoval      CredentialKind = "removal"      // remove the runner on release
)

// Credential is a short-lived GitHub credential for one instance and one claim.
type Credential struct {
	Kind      CredentialKind
	RunID     string    // the run it was issued for; the agent ignores a credential for another run
	URL       string    // repository or organisation URL to register with
	Token     string    // registration or remove token, or an encoded JIT config
	JIT       bool      // Token is an encoded JIT runner config
	Labels    []string  // runner labels, the run's unique label first
	ExpiresAt time.Time // GitHub's expiry of the token
}

func (s *Store) credentialKey(id string, kind CredentialKind) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.instancePK(id)), attrSK: sv(skCredential + "#" + string(kind))}
}

// PutCredential writes a credential to the instance's own partition, replacing any older one.
func (s *Store) PutCredential(ctx context.Context, id string, c Credential) error {
	if err := validateID(id); err != nil {
		return err
	}
	if c.Token == "" || c.RunID == "" || (c.Kind != CredentialRegistration && c.Kind != CredentialRemoval) {
		return fmt.Errorf("credential for %s: kind, run id and token are required: %w", id, ErrInvalid)
	}
	labels, _ := json.Marshal(c.Labels)
	item := s.credentialKey(id, c.Kind)
	item["run_id"] = sv(c.RunID)
	item["url"] = sv(c.URL)
	item["token"] = sv(c.Token)
	item["labels"] = sv(string(labels))
	if c.JIT {
		item["jit"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	item["expires_at"] = ms(c.ExpiresAt)
	ttl := c.ExpiresAt
	if ttl.IsZero() {
		ttl = s.now().Add(time.Hour)
	}
	item[attrTTL] = n(ttl.Unix())
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return classify("writing credential of "+id, err)
}

// ReadCredential reads the instance's credential of that kind for runID without removing it: the
// agent's access (the instance role may only read control-plane items). A credential issued for
// another run is reported as ErrConflict.
func (s *Store) ReadCredential(ctx context.Context, id string, kind CredentialKind, runID string) (Credential, error) {
	if err := validateID(id); err != nil {
		return Credential{}, err
	}
	item, err := s.getItem(ctx, fmt.Sprintf("credential %s of %s", kind, id), s.credentialKey(id, kind))
	if err != nil {
		return Credential{}, err
	}
	c, err := decodeCredential(id, kind, item)
	if err != nil {
		return Credential{}, err
	}
	if c.RunID != runID {
		return Credential{}, fmt.Errorf("credential %s of %s is for run %q, not %q: %w", kind, id, c.RunID, runID, ErrConflict)
	}
	return c, nil
}

// TakeCredential reads and deletes the instance's credential of that kind in one call: the control
// plane's withdrawal of a credential once the agent reported on it (or never will). A credential
// issued for another run is left alone and reported as ErrConflict.
func (s *Store) TakeCredential(ctx context.Context, id string, kind CredentialKind, runID string) (Credential, error) {
	if err := validateID(id); err != nil {
		return Credential{}, err
	}
	out, err := s.db.DeleteItem(writeCredentialTake.Context(ctx), &dynamodb.DeleteItemInput{
		TableName:                           &s.table,
		Key:                                 s.credentialKey(id, kind),
		ConditionExpression:                 aws.String("run_id = :r"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":r": sv(runID)},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) && len(ccf.Item) == 0 {
			return Credential{}, fmt.Errorf("credential %s of %s: %w", kind, id, ErrNotFound)
		}
		return Credential{}, classify("taking credential of "+id, err)
	}
	return decodeCredential(id, kind, out.Attributes)
}

func decodeCredential(id string, kind CredentialKind, item map[string]types.AttributeValue) (Credential, error) {
	d := &decoder{item: item}
	c := Credential{
		Kind: kind, RunID: d.str("run_id"), URL: d.str("url"), Token: d.str("token"),
		ExpiresAt: fromMS(d.num("expires_at")),
	}
	if b, ok := item["jit"].(*types.AttributeValueMemberBOOL); ok {
		c.JIT = b.Value
	}
	if l := d.str("labels"); l != "" {
		if jerr := json.Unmarshal([]byte(l), &c.Labels); jerr != nil {
			d.fail(jerr)
		}
	}
	if d.err != nil {
		return Credential{}, fmt.Errorf("credential of %s: %w: %w", id, ErrInvalid, d.err)
	}
	return c, nil
}

func isConflict(err error) bool { return errors.Is(err, ErrConflict) }
