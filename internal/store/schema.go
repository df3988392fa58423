// The table's schema: one definition shared by the Terraform provider (runnerpool_state_table), the
// tests and the demo, so every table runnerpool touches has the same keys and indexes.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client that manages tables.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TTLAttribute is the attribute DynamoDB's time to live reads (epoch seconds).
const TTLAttribute = attrTTL

// TableDefinition is the CreateTable input of a state table, billed on demand.
func TableDefinition(name string) *dynamodb.CreateTableInput {
	str := types.ScalarAttributeTypeS
	num := types.ScalarAttributeTypeN
	all := &types.Projection{ProjectionType: types.ProjectionTypeAll}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: str},
			{AttributeName: aws.String(attrSK), AttributeType: str},
			{AttributeName: aws.String(attrIdxState), AttributeType: str},
			{AttributeName: aws.String(attrThreshold), AttributeType: num},
			{AttributeName: aws.String(attrIdxRun), AttributeType: str},
			{AttributeName: aws.String(attrIdxPool), AttributeType: str},
			{AttributeName: aws.String(attrID), AttributeType: str},
			{AttributeName: aws.String(attrIdxFit), AttributeType: str},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{
				IndexName: aws.String(IndexByState),
				KeySchema: []types.KeySchemaElement{
					{AttributeName: aws.String(attrIdxState), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String(attrThreshold), KeyType: types.KeyTypeRange},
				},
				Projection: all,
			},
			{
				IndexName:  aws.String(IndexByRun),
				KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(attrIdxRun), KeyType: types.KeyTypeHash}},
				Projection: all,
			},
			{
				IndexName: aws.String(IndexByPool),
				KeySchema: []types.KeySchemaElement{
					{AttributeName: aws.String(attrIdxPool), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String(attrID), KeyType: types.KeyTypeRange},
				},
				Projection: all,
			},
			{
				IndexName: aws.String(IndexByFit),
				KeySchema: []types.KeySchemaElement{
					{AttributeName: aws.String(attrIdxFit), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String(attrIdxState), KeyType: types.KeyTypeRange},
				},
				Projection: all,
			},
		},
	}
}

// CreateTable creates a state table, waits until it is active and turns on time to live.
func CreateTable(ctx context.Context, api TableAPI, name string) error {
	if _, err := api.CreateTable(ctx, TableDefinition(name)); err != nil {
		return classify("creating table "+name, err)
	}
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 5*time.Minute); err != nil {
		return fmt.Errorf("waiting for table %s: %w", name, err)
	}
	_, err := api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true),
		},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return classify("enabling time to live on "+name, err)
	}
	return nil
}
