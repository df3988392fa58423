// Configuration items: runner classes and warm pools written by the Terraform provider and read by
// the reconciler every cycle. The store keeps the spec as opaque JSON; the packages that own the
// configuration model (runner classes, warm pools) validate it.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ConfigKind names a kind of configuration item.
type ConfigKind string

// The kinds of configuration the provider writes.
const (
	ConfigRunnerClass ConfigKind = "runner_class"
	ConfigWarmPool    ConfigKind = "warm_pool"
	ConfigScaleSet    ConfigKind = "scale_set"
)

var configNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ConfigItem is one configuration item.
type ConfigItem struct {
	Kind      ConfigKind
	Name      string
	Spec      json.RawMessage
	Version   int64 // incremented by every write
	UpdatedAt time.Time
}

func configKey(kind ConfigKind, name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixConfig + string(kind)), attrSK: sv(name)}
}

func validateConfig(kind ConfigKind, name string) error {
	if kind != ConfigRunnerClass && kind != ConfigWarmPool && kind != ConfigScaleSet {
		return fmt.Errorf("config kind %q: %w", kind, ErrInvalid)
	}
	if !configNameRE.MatchString(name) {
		return fmt.Errorf("config name %q: must be 1-128 letters, digits, '.', '_' or '-': %w", name, ErrInvalid)
	}
	return nil
}

// PutConfig writes a configuration item. expectVersion 0 means "must not exist"; otherwise the
// stored version must match (optimistic concurrency: two applies never silently overwrite).
// A negative expectVersion writes unconditionally.
func (s *Store) PutConfig(ctx context.Context, item ConfigItem, expectVersion int64) (ConfigItem, error) {
	if err := validateConfig(item.Kind, item.Name); err != nil {
		return ConfigItem{}, err
	}
	if !json.Valid(item.Spec) {
		return ConfigItem{}, fmt.Errorf("config %s/%s: spec is not valid JSON: %w", item.Kind, item.Name, ErrInvalid)
	}
	item.UpdatedAt = s.now()
	in := &dynamodb.PutItemInput{TableName: &s.table}
	wctx := ctx
	switch {
	case expectVersion == 0:
		item.Version = 1
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
		wctx = writeConfigCreate.Context(ctx)
	case expectVersion > 0:
		wctx = writeConfigUpdate.Context(ctx)
		item.Version = expectVersion + 1
		in.ConditionExpression = aws.String("version = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": n(expectVersion)}
	default:
		cur, err := s.GetConfig(ctx, item.Kind, item.Name)
		if err != nil && !isNotFound(err) {
			return ConfigItem{}, err
		}
		item.Version = cur.Version + 1
	}
	in.Item = configKey(item.Kind, item.Name)
	in.Item["kind"] = sv(string(item.Kind))
	in.Item["spec"] = sv(string(item.Spec))
	in.Item["version"] = n(item.Version)
	in.Item["updated_at"] = ms(item.UpdatedAt)
	token := newWriteToken()
	in.Item[attrWrite] = sv(token)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	if _, err := s.db.PutItem(wctx, in); err != nil && !isOwnWrite(err, token) {
		return ConfigItem{}, classify(fmt.Sprintf("writing config %s/%s", item.Kind, item.Name), err)
	}
	return item, nil
}

// GetConfig reads one configuration item.
func (s *Store) GetConfig(ctx context.Context, kind ConfigKind, name string) (ConfigItem, error) {
	if err := validateConfig(kind, name); err != nil {
		return ConfigItem{}, err
	}
	item, err := s.getItem(ctx, fmt.Sprintf("config %s/%s", kind, name), configKey(kind, name))
	if err != nil {
		return ConfigItem{}, err
	}
	return decodeConfig(item)
}

// ListConfig reads every item of a kind, ordered by name.
func (s *Store) ListConfig(ctx context.Context, kind ConfigKind) ([]ConfigItem, error) {
	if err := validateConfig(kind, "x"); err != nil {
		return nil, err
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(prefixConfig + string(kind))},
		ConsistentRead:            aws.Bool(true),
	})
	var out []ConfigItem
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing config "+string(kind), err)
		}
		for _, it := range page.Items {
			c, err := decodeConfig(it)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// DeleteConfig removes a configuration item; deleting a missing item is not an error.
func (s *Store) DeleteConfig(ctx context.Context, kind ConfigKind, name string) error {
	if err := validateConfig(kind, name); err != nil {
		return err
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: configKey(kind, name)})
	return classify(fmt.Sprintf("deleting config %s/%s", kind, name), err)
}

func decodeConfig(item map[string]types.AttributeValue) (ConfigItem, error) {
	d := &decoder{item: item}
	c := ConfigItem{
		Kind: ConfigKind(d.str("kind")), Name: d.str(attrSK), Spec: json.RawMessage(d.str("spec")),
		Version: d.num("version"), UpdatedAt: fromMS(d.num("updated_at")),
	}
	if d.err == nil && !json.Valid(c.Spec) {
		d.fail(fmt.Errorf("spec is not valid JSON"))
	}
	if d.err != nil {
		return ConfigItem{}, fmt.Errorf("decoding config %s: %w: %w", c.Name, ErrInvalid, d.err)
	}
	return c, nil
}
