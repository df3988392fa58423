// Queues per scope: the pool of a runner class that many repositories share. A release narrows an
// instance to one repository, so in one class queue shared by R repositories about 1/R of the
// messages fit a repository's request and a pickup receives, and hands back, all the others. With
// scope queues every scope (a repository, or an owner) has a queue of its own beside the class
// queue, named <class queue>-s-<8 hex of sha256(lower(scope))> (a FIFO class queue's keep the
// .fifo suffix): a message goes to its scope's queue, and a pickup reads only the queues of the
// scopes that cover its request (CoveringScopes), so the only misfits left are of size, type or
// usage class. Messages without a scope stay in the class queue.
//
// A scope queue is created on the first message into it (CreateQueue, with the class queue's
// attributes, read once) and remembered per replica; refresh lists them by name prefix, checks
// each, and deletes one that stayed empty for a day.
package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/singleflight"
)

// ScopeAPI is the SQS client of a pool with scope queues: SQSAPI, and what creating a scope queue
// like its class queue takes. *sqs.Client satisfies it.
type ScopeAPI interface {
	SQSAPI
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, opts ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// ScopeInfix separates a scope queue's class queue name from its scope's hash.
const ScopeInfix = "-s-"

// MaxQueueName is SQS's limit on a queue name.
const MaxQueueName = 80

// scopeHashLen is the hex digits of sha256(lower(scope)) in a scope queue's name: 32 bits, so
// two scopes of one class share a queue with probability about n²/2³³ (n = 1,000: 0.01 %), and
// then only their messages meet, which the filter sorts as before.
const scopeHashLen = 8

// absentFor is how long a pickup skips a scope queue a receive found missing: a replica that
// releases into it creates it, and until this replica reads it again the second look finds what
// it holds.
const absentFor = 30 * time.Second

// creatable are the class queue's attributes a scope queue copies (CreateQueue takes them; the
// class queue's policy and redrive policy name the class queue itself and are not copied).
var creatable = []types.QueueAttributeName{
	types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameMessageRetentionPeriod,
	types.QueueAttributeNameMaximumMessageSize, types.QueueAttributeNameDelaySeconds,
	types.QueueAttributeNameReceiveMessageWaitTimeSeconds, types.QueueAttributeNameKmsMasterKeyId,
	types.QueueAttributeNameKmsDataKeyReusePeriodSeconds, types.QueueAttributeNameSqsManagedSseEnabled,
	types.QueueAttributeNameFifoQueue, types.QueueAttributeNameContentBasedDeduplication,
	types.QueueAttributeNameDeduplicationScope, types.QueueAttributeNameFifoThroughputLimit,
}

// ScopeOptions tune a pool with scope queues. Zero values take the defaults.
type ScopeOptions struct {
	Now    func() time.Time
	Logger *slog.Logger
}

// scopes is the scope queues of one class queue, as one replica knows them.
type scopes struct {
	api ScopeAPI
	naming
	now    func() time.Time
	log    *slog.Logger
	flight singleflight.Group

	mu     sync.Mutex
	attrs  map[string]string    // the class queue's creatable attributes; nil until read
	known  map[string]bool      // scope queue URLs this replica created or found
	absent map[string]time.Time // scope queue URLs a receive found missing, and when
}

// NewScopedQueue returns the pool of the class queue at url with a queue per scope. A class queue
// whose name leaves no room for the scope suffix within SQS's 80 characters keeps every message in
// the class queue (logged).
func NewScopedQueue(api ScopeAPI, url string, opts ScopeOptions) *Queue {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	q := NewQueue(api, url)
	n, ok := scopeNaming(url)
	if !ok {
		opts.Logger.Warn("pool queue without scope queues: its name leaves no room for a scope suffix within SQS's limit; every message stays in it",
			"queue", url, "limit", MaxQueueName)
		return q
	}
	q.scopes = &scopes{api: api, naming: n, now: opts.Now, log: opts.Logger, known: map[string]bool{}, absent: map[string]time.Time{}}
	return q
}

// naming is how the scope queues of a class queue are named.
type naming struct {
	name   string // their name prefix: the class queue's name (without .fifo) and ScopeInfix
	prefix string // their URL up to the hash
	suffix string // ".fifo" or ""
}

// scopeNaming derives the naming of the scope queues of the class queue at url; false when a
// scope queue's name would exceed SQS's limit.
func scopeNaming(url string) (naming, bool) {
	slash := strings.LastIndex(url, "/")
	base, suffix := url[slash+1:], ""
	if b, ok := strings.CutSuffix(base, ".fifo"); ok {
		base, suffix = b, ".fifo"
	}
	if slash < 0 || base == "" || len(base)+len(ScopeInfix)+scopeHashLen+len(suffix) > MaxQueueName {
		return naming{}, false
	}
	return naming{name: base + ScopeInfix, prefix: url[:slash+1] + base + ScopeInfix, suffix: suffix}, true
}

// isScopeQueue reports whether url names one of these scope queues.
func (n naming) isScopeQueue(url string) bool {
	hash, ok := strings.CutPrefix(url, n.prefix)
	hash, fifo := strings.CutSuffix(hash, ".fifo")
	return ok && fifo == (n.suffix != "") && len(hash) == scopeHashLen && strings.Trim(hash, "0123456789abcdef") == ""
}

// ListQueuesAPI is the part of the SQS client ListScopeQueues uses; *sqs.Client satisfies it.
type ListQueuesAPI interface {
	ListQueues(ctx context.Context, in *sqs.ListQueuesInput, opts ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
}

// ListScopeQueues lists the scope queues that exist of the class queue at classURL (ListQueues
// by name prefix, 1,000 a page): refresh checks them, the invariant checker reads them.
func ListScopeQueues(ctx context.Context, api ListQueuesAPI, classURL string) ([]string, error) {
	n, ok := scopeNaming(classURL)
	if !ok {
		return nil, nil
	}
	var out []string
	pg := sqs.NewListQueuesPaginator(api, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(n.name), MaxResults: aws.Int32(1000)})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return out, fmt.Errorf("listing the scope queues of %s: %w", classURL, err)
		}
		for _, url := range page.QueueUrls {
			if n.isScopeQueue(url) {
				out = append(out, url)
			}
		}
	}
	return out, nil
}

// Scoped reports whether the pool keeps a queue per scope.
func (q *Queue) Scoped() bool { return q.scopes != nil }

// IsScopeQueue reports whether url is the URL of one of the pool's scope queues.
func (q *Queue) IsScopeQueue(url string) bool { return q.scopes != nil && q.scopes.isScopeQueue(url) }

// URLFor is the URL of the queue a message of scope goes to: its scope queue, or the class queue
// for a message without a scope (or a pool without scope queues).
func (q *Queue) URLFor(scope string) string {
	if q.scopes == nil || scope == "" {
		return q.url
	}
	sum := sha256.Sum256([]byte(strings.ToLower(scope)))
	return q.scopes.prefix + hex.EncodeToString(sum[:])[:scopeHashLen] + q.scopes.suffix
}

// readURLs are the queues a pickup for a request of scope reads, in order: the queues of the
// scopes that cover it (the repository's, then its owner's), without those a receive found missing
// a moment ago. A pool without scope queues, or a request without a scope, reads the class queue.
func (q *Queue) readURLs(scope string) []string {
	if q.scopes == nil || scope == "" {
		return []string{q.url}
	}
	var out []string
	for _, s := range CoveringScopes(scope) {
		if url := q.URLFor(s); !q.scopes.isAbsent(url) {
			out = append(out, url)
		}
	}
	return out
}

// PutInScope puts m in the queue of its scope (URLFor), and nowhere else: refresh moves a message
// found in another of the pool's queues with it (one that went to the class queue when its scope
// queue would not take it), and keeps it where it is when this fails.
func (q *Queue) PutInScope(ctx context.Context, m Message) error {
	body, err := m.Encode()
	if err != nil {
		return err
	}
	if url := q.URLFor(m.Scope); url != q.url {
		_, err = q.send(ctx, m, url, body, 0)
		return err
	}
	return q.sendTo(ctx, m, q.url, body, 0)
}

// Forget makes the replica create the scope queue at url again before its next message (refresh
// deleted it).
func (q *Queue) Forget(url string) {
	if q.scopes != nil {
		q.scopes.forget(url)
	}
}

func (s *scopes) forget(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, url)
}

// markAbsent records that a receive found the queue at url missing.
func (s *scopes) markAbsent(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, url)
	s.absent[url] = s.now()
}

func (s *scopes) isAbsent(url string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.absent[url]
	if ok && s.now().Sub(at) >= absentFor {
		delete(s.absent, url)
		return false
	}
	return ok
}

// ensure creates the scope queue at url unless this replica created or found it before. Many
// releases into a new scope at once make one CreateQueue.
func (s *scopes) ensure(ctx context.Context, url string) error {
	s.mu.Lock()
	known := s.known[url]
	s.mu.Unlock()
	if known {
		return nil
	}
	_, err, _ := s.flight.Do(url, func() (any, error) {
		attrs, err := s.attributes(ctx)
		if err != nil {
			return nil, err
		}
		name := url[strings.LastIndex(url, "/")+1:]
		_, err = s.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		var exists *types.QueueNameExists
		switch {
		case errors.As(err, &exists):
			// It exists with other attributes: the class queue's changed since it was created.
			// It is still the scope's queue.
			s.log.Info("scope queue exists with attributes other than its class queue's", "queue", url, "err", err)
		case err != nil:
			return nil, fmt.Errorf("creating scope queue %s: %w", name, err)
		}
		s.mu.Lock()
		s.known[url] = true
		delete(s.absent, url)
		s.mu.Unlock()
		return nil, nil
	})
	return err
}

// attributes reads the class queue's creatable attributes once.
func (s *scopes) attributes(ctx context.Context) (map[string]string, error) {
	s.mu.Lock()
	attrs := s.attrs
	s.mu.Unlock()
	if attrs != nil {
		return attrs, nil
	}
	class := strings.TrimSuffix(s.prefix, ScopeInfix) + s.suffix
	out, err := s.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(class), AttributeNames: creatable})
	if err != nil {
		return nil, fmt.Errorf("reading the attributes of class queue %s: %w", class, err)
	}
	attrs = map[string]string{}
	for _, name := range creatable {
		if v := out.Attributes[string(name)]; v != "" {
			attrs[string(name)] = v
		}
	}
	s.mu.Lock()
	s.attrs = attrs
	s.mu.Unlock()
	return attrs, nil
}
