// runner_release.go: the current Actions runner release the reconciler read from GitHub, kept in the
// table so every replica launches the same release and a GitHub outage keeps the last one known.
// Only the reconciler writes it (the instances' role reaches their own items only).
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
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

const (
	prefixRunnerRelease = "RUNNER_RELEASE#"
	skRunnerRelease     = "RELEASE"
)

var writeRunnerRelease = condwrite.Declare("runner release put")

// RunnerRelease is the release read for a GitHub scope, and when it was read.
type RunnerRelease struct {
	Scope     string
	Release   runnerversion.Release
	FetchedAt time.Time
	// Source names where the release was read (internal/runnerrelease); empty in items written
	// before it was kept.
	Source string
	// Releases are the releases GitHub published, with their publication times and no downloads;
	// empty when they could not be read.
	Releases []runnerversion.Release
}

func runnerReleaseKey(scope string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixRunnerRelease + scope), attrSK: sv(skRunnerRelease)}
}

// GetRunnerRelease reads the release kept for scope (ErrNotFound when none).
func (s *Store) GetRunnerRelease(ctx context.Context, scope string) (RunnerRelease, error) {
	item, err := s.getItem(ctx, "runner release of "+scope, runnerReleaseKey(scope))
	if err != nil {
		return RunnerRelease{}, err
	}
	d := &decoder{item: item}
	rr := RunnerRelease{Scope: scope, FetchedAt: time.UnixMilli(d.num("fetched_at")).UTC()}
	if d.err == nil {
		d.err = json.Unmarshal([]byte(d.str("release")), &rr.Release)
	}
	if js := d.str("releases"); d.err == nil && js != "" {
		d.err = json.Unmarshal([]byte(js), &rr.Releases)
	}
	rr.Source = d.str("source")
	if d.err == nil {
		d.err = rr.Release.Validate()
	}
	if d.err != nil {
		return RunnerRelease{}, fmt.Errorf("runner release of %s: %w: %w", scope, ErrInvalid, d.err)
	}
	return rr, nil
}

// PutRunnerRelease keeps rr unless the table holds one fetched later (a slower replica's read loses).
func (s *Store) PutRunnerRelease(ctx context.Context, rr RunnerRelease) error {
	if err := rr.Release.Validate(); err != nil {
		return fmt.Errorf("runner release of %s: %w: %w", rr.Scope, ErrInvalid, err)
	}
	js, err := json.Marshal(rr.Release)
	if err != nil {
		return fmt.Errorf("runner release of %s: %w", rr.Scope, err)
	}
	item := runnerReleaseKey(rr.Scope)
	item["release"], item["version"], item["fetched_at"] = sv(string(js)), sv(rr.Release.Version), ms(rr.FetchedAt)
	if rr.Source != "" {
		item["source"] = sv(rr.Source)
	}
	if len(rr.Releases) > 0 {
		rels, err := json.Marshal(rr.Releases)
		if err != nil {
			return fmt.Errorf("runner release of %s: %w", rr.Scope, err)
		}
		item["releases"] = sv(string(rels))
	}
	_, err = s.db.PutItem(writeRunnerRelease.Context(ctx), &dynamodb.PutItemInput{
		TableName: &s.table, Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR fetched_at <= :f"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": ms(rr.FetchedAt)},
	})
	if err = classify("keeping the runner release of "+rr.Scope, err); errors.Is(err, ErrConflict) {
		return nil // a later read is kept already
	}
	return err
}
