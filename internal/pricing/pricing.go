// Package pricing answers "what does an hour of this instance cost, and how do we know": from an
// operator's price file first (exact, and the only source where no AWS pricing API is reachable),
// then from the AWS Price List API (on-demand) or EC2's spot price history (spot), cached. Every
// answer names its source, so a figure built from it can say where its price came from; a price
// nobody knows is reported as unknown (zero, Source "unknown"), never guessed.
package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Usage classes, as in instance records.
const (
	OnDemand = "on-demand"
	Spot     = "spot"
)

// Sources of a price.
const (
	SourceFile      = "price-file"
	SourcePriceList = "aws-price-list"
	SourceSpot      = "aws-spot-history"
	SourceUnknown   = "unknown"
)

// Key identifies what is priced: an instance type, its usage class and (for spot) its zone.
type Key struct {
	InstanceType string
	UsageClass   string // OnDemand or Spot; empty is on-demand
	Zone         string // spot prices differ by zone; empty: any
}

func (k Key) usage() string {
	if k.UsageClass == Spot {
		return Spot
	}
	return OnDemand
}

// Price is the hourly price of a Key in USD, and where it came from.
type Price struct {
	PerHour float64
	Source  string
	At      time.Time // when the source gave it (file: when the file was read)
}

// Known reports whether the price came from a source.
func (p Price) Known() bool { return p.Source != SourceUnknown && p.Source != "" }

// Lookup fetches a price from an AWS API. Price List and spot history lookups implement it; tests
// use a double. ok is false when the source has no price for the key.
type Lookup interface {
	Lookup(ctx context.Context, k Key) (perHour float64, ok bool, err error)
}

// File is the operator's price file: JSON, prices in USD per hour.
//
//	{"prices": [
//	  {"instance_type": "m7i.large", "usage_class": "on-demand", "per_hour": 0.1008},
//	  {"instance_type": "m7i.large", "usage_class": "spot", "per_hour": 0.0391}
//	]}
//
// A row without usage_class prices both usage classes; "*" as instance_type is the fallback for
// every type the file does not list.
type File struct {
	Prices []FileRow `json:"prices"`
}

// FileRow is one price of a File.
type FileRow struct {
	InstanceType string  `json:"instance_type"`
	UsageClass   string  `json:"usage_class,omitempty"`
	Zone         string  `json:"zone,omitempty"`
	PerHour      float64 `json:"per_hour"`
}

// ParseFile validates a price file. Every problem is reported with the row it is in.
func ParseFile(b []byte) (File, error) {
	var f File
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("price file: %w", err)
	}
	var errs []error
	for i, r := range f.Prices {
		switch {
		case r.InstanceType == "":
			errs = append(errs, fmt.Errorf("price file: prices[%d]: instance_type is required", i))
		case r.UsageClass != "" && r.UsageClass != OnDemand && r.UsageClass != Spot:
			errs = append(errs, fmt.Errorf("price file: prices[%d]: usage_class %q: want %s or %s", i, r.UsageClass, OnDemand, Spot))
		case r.PerHour < 0 || r.PerHour > 1000:
			errs = append(errs, fmt.Errorf("price file: prices[%d]: per_hour %v: want 0 to 1000 USD", i, r.PerHour))
		}
	}
	return f, errors.Join(errs...)
}

// ReadFile reads and validates a price file.
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("reading price file: %w", err)
	}
	return ParseFile(b)
}

// find returns the file's price of k: the most specific row wins (type+usage+zone, type+usage,
// type, then "*" rows in the same order).
func (f File) find(k Key) (float64, bool) {
	best, score := 0.0, -1
	for _, r := range f.Prices {
		s := 0
		switch r.InstanceType {
		case k.InstanceType:
			s = 8
		case "*":
		default:
			continue
		}
		switch r.UsageClass {
		case k.usage():
			s += 4
		case "":
		default:
			continue
		}
		switch r.Zone {
		case k.Zone:
			if r.Zone != "" {
				s += 2
			}
		case "":
		default:
			continue
		}
		if s > score {
			best, score = r.PerHour, s
		}
	}
	return best, score >= 0
}

// Options configure a Book.
type Options struct {
	File      *File  // the operator's prices; nil: none
	PriceList Lookup // on-demand prices; nil: none
	Spot      Lookup // spot prices; nil: none
	// TTL is how long a fetched price (or a failed fetch) is kept; default 1 h. A failed fetch is
	// retried after a tenth of it.
	TTL time.Duration
	// Timeout bounds one fetch (default 5 s): a page or a scrape never waits long on AWS.
	Timeout time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
}

// Book resolves prices. Safe for concurrent use.
type Book struct {
	o        Options
	fileRead time.Time

	mu    sync.Mutex
	cache map[Key]cached
}

type cached struct {
	p       Price
	expires time.Time
}

// New returns a Book.
func New(o Options) *Book {
	if o.TTL <= 0 {
		o.TTL = time.Hour
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Book{o: o, fileRead: o.Now().UTC(), cache: map[Key]cached{}}
}

// Price returns the hourly price of k and its source. The file wins over AWS: an operator who
// writes a price (a negotiated discount, a savings plan) means it.
func (b *Book) Price(ctx context.Context, k Key) Price {
	if b == nil || k.InstanceType == "" {
		return Price{Source: SourceUnknown}
	}
	if b.o.File != nil {
		if v, ok := b.o.File.find(k); ok {
			return Price{PerHour: v, Source: SourceFile, At: b.fileRead}
		}
	}
	src, lk := SourcePriceList, b.o.PriceList
	if k.usage() == Spot {
		src, lk = SourceSpot, b.o.Spot
	}
	if lk == nil {
		return Price{Source: SourceUnknown}
	}
	now := b.o.Now()
	b.mu.Lock()
	c, ok := b.cache[k]
	b.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.p
	}
	fctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	v, found, err := lk.Lookup(fctx, k)
	p, ttl := Price{PerHour: v, Source: src, At: now.UTC()}, b.o.TTL
	switch {
	case err != nil:
		b.o.Logger.Warn("pricing: lookup failed", "source", src, "instance_type", k.InstanceType, "usage_class", k.usage(), "error", err)
		p, ttl = Price{Source: SourceUnknown}, b.o.TTL/10
		if ok { // keep the last good price rather than forget it
			p = c.p
		}
	case !found:
		p = Price{Source: SourceUnknown}
	}
	b.mu.Lock()
	b.cache[k] = cached{p: p, expires: now.Add(ttl)}
	b.mu.Unlock()
	return p
}

// PerHour is Price as a plain function (history.Pricer's shape): the hourly price and its source.
func (b *Book) PerHour(ctx context.Context, instanceType, usageClass, zone string) (float64, string) {
	p := b.Price(ctx, Key{InstanceType: instanceType, UsageClass: usageClass, Zone: zone})
	return p.PerHour, p.Source
}
