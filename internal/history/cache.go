// The runner cache's cost (docs/cache.md): what the cache bucket stores and the S3 requests the
// control plane presigned for it, per repository and hour, priced at S3 Standard's list prices. The
// figures are the control plane's own: the requests are counted where it presigns them (never from
// what an agent reports) and the stored bytes where its eviction pass lists the bucket.
//
// Layout (pk / sk), one item per repository and hour, counters added atomically by every replica:
//
//	HISTORY#CACHE#2026-11-25 / 1764072000000#acme/app    gets, puts, lists, bytes, bytes_at
package history

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const prefixCache = "HISTORY#CACHE#"

// Cache request kinds, as S3 prices them: a get is a GET, a put a PUT, a list a LIST (priced as a
// PUT).
const (
	CacheGet  = "get"
	CachePut  = "put"
	CacheList = "list"
)

// CacheUsage is one repository's (or the total's) use of the cache bucket over a window.
type CacheUsage struct {
	Repository        string
	Gets, Puts, Lists int64
	// Bytes is the mean of what the eviction pass measured the repository holding in the window
	// (0 when it measured nothing).
	Bytes int64
}

// CachePrices are S3's prices the cache is charged at.
type CachePrices struct {
	StoragePerGBMonth float64 // USD per GB-month (S3 bills storage per GB-month; a month is 30 days here)
	PutPer1000        float64 // USD per 1,000 PUT, COPY, POST or LIST requests
	GetPer1000        float64 // USD per 1,000 GET requests
	Source            string
}

// DefaultCachePrices are S3 Standard's list prices in us-east-1 (https://aws.amazon.com/s3/pricing/,
// "Storage pricing": first 50 TB $0.023 per GB-month; "Requests & data retrievals": PUT, COPY,
// POST, LIST $0.005 per 1,000, GET $0.0004 per 1,000). Transfer from S3 to instances in the same
// region is free; a NAT gateway in between is not, and a gateway endpoint for S3 avoids it.
var DefaultCachePrices = CachePrices{StoragePerGBMonth: 0.023, PutPer1000: 0.005, GetPer1000: 0.0004, Source: "s3-standard-us-east-1"}

// CacheCost is the cache's cost in a window: storage and requests, per repository and in total.
type CacheCost struct {
	Repositories []CacheLine // by cost, highest first
	Total        CacheLine
	Source       string
}

// CacheLine is one repository's (or the total's) cache cost.
type CacheLine struct {
	CacheUsage
	StorageCost, RequestCost, Cost float64
}

// PriceCache prices usage over a window of length window.
func PriceCache(usage []CacheUsage, window time.Duration, p CachePrices) CacheCost {
	out := CacheCost{Total: CacheLine{CacheUsage: CacheUsage{Repository: "total"}}, Source: p.Source}
	months := window.Hours() / (30 * 24)
	for _, u := range usage {
		l := CacheLine{CacheUsage: u}
		l.StorageCost = float64(u.Bytes) / 1e9 * p.StoragePerGBMonth * months
		l.RequestCost = float64(u.Puts+u.Lists)/1000*p.PutPer1000 + float64(u.Gets)/1000*p.GetPer1000
		l.Cost = l.StorageCost + l.RequestCost
		out.Repositories = append(out.Repositories, l)
		t := &out.Total
		t.Gets, t.Puts, t.Lists, t.Bytes = t.Gets+u.Gets, t.Puts+u.Puts, t.Lists+u.Lists, t.Bytes+u.Bytes
		t.StorageCost, t.RequestCost, t.Cost = t.StorageCost+l.StorageCost, t.RequestCost+l.RequestCost, t.Cost+l.Cost
	}
	slices.SortStableFunc(out.Repositories, func(a, b CacheLine) int {
		return cmp.Or(cmp.Compare(b.Cost, a.Cost), strings.Compare(a.Repository, b.Repository))
	})
	return out
}

func cacheKey(hour time.Time, repo string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": sv(prefixCache + day(hour)), "sk": sv(fmt.Sprintf("%013d#%s", hour.UnixMilli(), repo))}
}

// AddCacheRequests adds a repository's presigned requests to the hour containing at (one
// UpdateItem; counters add up across replicas).
func (s *Store) AddCacheRequests(ctx context.Context, at time.Time, repo string, gets, puts, lists int64) error {
	hour := at.UTC().Truncate(time.Hour)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: cacheKey(hour, repo),
		UpdateExpression:         aws.String("ADD gets :g, puts :p, lists :l SET #ttl = :ttl"),
		ExpressionAttributeNames: map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":g": nv(gets), ":p": nv(puts), ":l": nv(lists), ":ttl": nv(hour.Add(s.o.SampleRetention).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("history: adding cache requests of %s: %w", repo, err)
	}
	return nil
}

// SetCacheBytes records what a repository held in the bucket at at (the eviction pass's
// measurement), in the hour containing at.
func (s *Store) SetCacheBytes(ctx context.Context, at time.Time, repo string, bytes int64) error {
	hour := at.UTC().Truncate(time.Hour)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: cacheKey(hour, repo),
		UpdateExpression:         aws.String("SET bytes = :b, bytes_at = :at, #ttl = :ttl"),
		ExpressionAttributeNames: map[string]string{"#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":b": nv(bytes), ":at": nv(at.UnixMilli()), ":ttl": nv(hour.Add(s.o.SampleRetention).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("history: recording the cache bytes of %s: %w", repo, err)
	}
	return nil
}

// CacheUsage sums each repository's cache requests of the hours that overlap [from, to) and
// averages its measured bytes over them: one Query per UTC day, the days read at once.
func (s *Store) CacheUsage(ctx context.Context, from, to time.Time) ([]CacheUsage, error) {
	var days []time.Time
	for d := from.UTC().Truncate(24 * time.Hour); d.Before(to); d = d.Add(24 * time.Hour) {
		days = append(days, d)
	}
	type hourly struct {
		repo                    string
		gets, puts, lists, byts int64
		measured                bool
	}
	items, err := eachDay(ctx, days, func(ctx context.Context, d time.Time) ([]hourly, error) {
		var out []hourly
		p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
			TableName:              &s.table,
			KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": sv(prefixCache + day(d)), ":a": sv(fmt.Sprintf("%013d", from.UTC().Truncate(time.Hour).UnixMilli())),
				":b": sv(fmt.Sprintf("%013d~", to.UnixMilli()-1)),
			},
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("history: listing cache usage of %s: %w", day(d), err)
			}
			for _, it := range page.Items {
				skv, _ := it["sk"].(*types.AttributeValueMemberS)
				if skv == nil {
					continue
				}
				_, repo, ok := strings.Cut(skv.Value, "#")
				if !ok {
					continue
				}
				h := hourly{repo: repo, gets: intAttr(it, "gets"), puts: intAttr(it, "puts"), lists: intAttr(it, "lists"), byts: intAttr(it, "bytes")}
				_, h.measured = it["bytes_at"]
				out = append(out, h)
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	by := map[string]*CacheUsage{}
	measured := map[string]int64{}
	for _, h := range items {
		u := by[h.repo]
		if u == nil {
			u = &CacheUsage{Repository: h.repo}
			by[h.repo] = u
		}
		u.Gets, u.Puts, u.Lists = u.Gets+h.gets, u.Puts+h.puts, u.Lists+h.lists
		if h.measured {
			u.Bytes += h.byts
			measured[h.repo]++
		}
	}
	out := make([]CacheUsage, 0, len(by))
	for _, repo := range slices.Sorted(maps.Keys(by)) {
		u := *by[repo]
		if n := measured[repo]; n > 0 {
			u.Bytes /= n
		}
		out = append(out, u)
	}
	return out, nil
}

func intAttr(it map[string]types.AttributeValue, name string) int64 {
	n, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, _ := strconv.ParseInt(n.Value, 10, 64)
	return v
}

// CacheMeter counts the control plane's presigned cache requests per repository in memory and
// adds them to the history once per Flush, so a request costs no table write of its own.
type CacheMeter struct {
	mu     sync.Mutex
	counts map[string]*[3]int64 // repository: gets, puts, lists
}

// Count adds one request of kind (CacheGet, CachePut, CacheList) for repo (owner/name; kept in
// lower case, as the bucket's object keys and the eviction pass's measurements name it).
func (m *CacheMeter) Count(repo, kind string) {
	repo = strings.ToLower(repo)
	i := slices.Index([]string{CacheGet, CachePut, CacheList}, kind)
	if m == nil || i < 0 || repo == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[string]*[3]int64{}
	}
	c := m.counts[repo]
	if c == nil {
		c = &[3]int64{}
		m.counts[repo] = c
	}
	c[i]++
}

// Flush adds what was counted since the last Flush to s at at. What could not be written is kept
// for the next Flush.
func (m *CacheMeter) Flush(ctx context.Context, s *Store, at time.Time) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	counts := m.counts
	m.counts = nil
	m.mu.Unlock()
	var failed error
	for repo, c := range counts {
		if err := s.AddCacheRequests(ctx, at, repo, c[0], c[1], c[2]); err != nil {
			failed = err
			m.mu.Lock()
			if m.counts == nil {
				m.counts = map[string]*[3]int64{}
			}
			if k := m.counts[repo]; k != nil {
				k[0], k[1], k[2] = k[0]+c[0], k[1]+c[1], k[2]+c[2]
			} else {
				m.counts[repo] = c
			}
			m.mu.Unlock()
		}
	}
	return failed
}
