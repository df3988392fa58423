// Instance keys: with --instance-keys arn every item of an instance sits under its ARN.
package service_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// TestInstanceKeysARN: a replica configured with ARN keys and an explicit account writes the
// records of a provision (reused and created instances alike) under INSTANCE#<instance ARN>, where
// the agents, keyed the same way, find them; nothing is under INSTANCE#<instance id>.
func TestInstanceKeysARN(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{InstanceKeys: "arn"})
	pooled := env.Fill(t, 1)
	r := env.Start(t, "a", nil)
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "4001", nil), provisionBody(2))
	if code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
	if len(prov.Runners) != 2 {
		t.Fatalf("provision answer %+v, want 2 runners", prov)
	}
	const arnPrefix = "arn:aws:ec2:" + servicetest.Region + ":" + servicetest.Account + ":instance/"
	if env.KeyPrefix != arnPrefix {
		t.Fatalf("environment key prefix %q, want %q", env.KeyPrefix, arnPrefix)
	}
	db := env.Stack.DynamoDB()
	items := func(pk string) []map[string]types.AttributeValue {
		t.Helper()
		out, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(env.Table), KeyConditionExpression: aws.String("pk = :pk"), ConsistentRead: aws.Bool(true),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
		})
		if err != nil {
			t.Fatalf("Query %s: %v", pk, err)
		}
		return out.Items
	}
	sources := map[string]string{}
	for _, rn := range prov.Runners {
		sources[rn.Source] = rn.InstanceID
		// The control plane's record under INSTANCE#<ARN>; the agent's signal of its registration
		// and its heartbeat under AGENT#<ARN> (the only partition the instance role may write).
		if byARN := items(store.InstancePK(arnPrefix + rn.InstanceID)); len(byARN) < 1 {
			t.Errorf("%s (%s): %d items under its ARN key, want its record", rn.InstanceID, rn.Source, len(byARN))
		}
		if agent := items(store.AgentPK(arnPrefix + rn.InstanceID)); len(agent) < 2 {
			t.Errorf("%s (%s): %d items under its agent ARN key, want its signal and its heartbeat", rn.InstanceID, rn.Source, len(agent))
		}
		if byID := items(store.InstancePK(rn.InstanceID)); len(byID) != 0 {
			t.Errorf("%s: %d items under INSTANCE#<id>, want none", rn.InstanceID, len(byID))
		}
		if byID := items(store.AgentPK(rn.InstanceID)); len(byID) != 0 {
			t.Errorf("%s: %d items under AGENT#<id>, want none", rn.InstanceID, len(byID))
		}
	}
	if sources[apiv1.SourceReused] != pooled[0] || sources[apiv1.SourceCreated] == "" {
		t.Errorf("sources %v: want %s reused and one created", sources, pooled[0])
	}
	env.Audit(t)
}
