package store_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// BenchmarkTableWrites measures the test stack's table, not the product: PutItems of distinct
// items (an agent's signal, each instance its own partition) with 1, 10 and 60 writers at once.
// DynamoDB Local writes one at a time, so its writes a second barely grow with the writers; a
// burst's table writes then bound its latency on this stack (docs/scaling.md), where real DynamoDB
// spreads them over the items' partitions.
//
//	go test -run '^$' -bench BenchmarkTableWrites ./internal/store
func BenchmarkTableWrites(b *testing.B) {
	db := stacktest.Shared(b).DynamoDB()
	table := stacktest.UniqueName(b, "writes")
	if err := store.CreateTable(b.Context(), db, table); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	put := func() error {
		_, err := db.PutItem(b.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("AGENT#i-%017x", seq.Add(1))}, "sk": &types.AttributeValueMemberS{Value: "SIGNAL"},
			"signal": &types.AttributeValueMemberS{Value: "UD_REG_OK"},
		}})
		return err
	}
	for _, writers := range []int{1, 10, 60} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			jobs := make(chan struct{})
			var wg sync.WaitGroup
			var failed atomic.Value
			for range writers {
				wg.Go(func() {
					for range jobs {
						if err := put(); err != nil {
							failed.Store(err)
						}
					}
				})
			}
			b.ResetTimer()
			for b.Loop() {
				jobs <- struct{}{}
			}
			close(jobs)
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
