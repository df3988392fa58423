// The unavailable-offerings cache: which (usage class, instance type, zone) capacity pools EC2
// recently said it could not fill, so the next fleet does not ask for them again straight away.
package fleet

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Offering is one EC2 capacity pool: an instance type in a zone, bought as spot or on-demand.
type Offering struct {
	UsageClass   string
	InstanceType string
	Zone         string
}

// UnavailableOffering is a cached offering and until when it is skipped.
type UnavailableOffering struct {
	Offering
	Until  time.Time
	Reason string // the EC2 error code that put it there
}

// offerings is a TTL cache of exhausted offerings. EC2 capacity comes back on its own within
// minutes, so an entry only lives for ttl; a later error on the same offering renews it.
type offerings struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[Offering]UnavailableOffering
}

func newOfferings(ttl time.Duration, now func() time.Time) *offerings {
	return &offerings{ttl: ttl, now: now, entries: map[Offering]UnavailableOffering{}}
}

func (o *offerings) markUnavailable(off Offering, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries[off] = UnavailableOffering{Offering: off, Until: o.now().Add(o.ttl), Reason: reason}
}

// unavailableIn returns the instance types of a usage class cached as unavailable in a zone.
func (o *offerings) unavailableIn(usageClass, zone string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	var out []string
	for k, e := range o.entries {
		if !now.Before(e.Until) {
			delete(o.entries, k)
			continue
		}
		if k.UsageClass == usageClass && k.Zone == zone {
			out = append(out, k.InstanceType)
		}
	}
	slices.Sort(out)
	return out
}

// list returns the live entries, sorted.
func (o *offerings) list() []UnavailableOffering {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	var out []UnavailableOffering
	for k, e := range o.entries {
		if !now.Before(e.Until) {
			delete(o.entries, k)
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b UnavailableOffering) int {
		return strings.Compare(a.UsageClass+"/"+a.Zone+"/"+a.InstanceType, b.UsageClass+"/"+b.Zone+"/"+b.InstanceType)
	})
	return out
}
