// The repository: runner classes and warm pools as configuration items of the state table, with
// optimistic versions so two writers (two applies, or an apply and an operator) never silently
// overwrite each other.
package declared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Store is the part of *store.Store the repository uses.
type Store interface {
	PutConfig(ctx context.Context, item store.ConfigItem, expectVersion int64) (store.ConfigItem, error)
	GetConfig(ctx context.Context, kind store.ConfigKind, name string) (store.ConfigItem, error)
	ListConfig(ctx context.Context, kind store.ConfigKind) ([]store.ConfigItem, error)
	DeleteConfig(ctx context.Context, kind store.ConfigKind, name string) error
}

var (
	// ErrUnknownRunnerClass: a warm pool names a runner class that is not in the table.
	ErrUnknownRunnerClass = errors.New("unknown runner class")
	// ErrInUse: a runner class cannot be deleted while warm pools use it.
	ErrInUse = errors.New("in use")
)

// Repository reads and writes runner classes and warm pools.
type Repository struct {
	st Store
}

// NewRepository returns a repository over a store (usually *store.Store).
func NewRepository(st Store) *Repository { return &Repository{st: st} }

// Snapshot is every valid runner class and warm pool at one moment.
type Snapshot struct {
	RunnerClasses map[string]RunnerClass
	// WarmPools holds the pools whose spec and runner class are valid; the others are in Problems.
	WarmPools map[string]WarmPool
	// Versions are the store versions of the items read, by kind and name.
	Versions map[store.ConfigKind]map[string]int64
	// Problems lists the items left out: a bad spec, or a pool whose runner class is missing or
	// invalid. One bad item never hides the others.
	Problems []*ItemError

	calendars map[string]*schedule.Calendar
}

// ItemError is a configuration item left out of a snapshot. Its message names the item.
type ItemError struct {
	Kind store.ConfigKind
	Name string
	Err  error
}

func (e *ItemError) Error() string { return e.Err.Error() }
func (e *ItemError) Unwrap() error { return e.Err }

// Target is the schedule target of a warm pool at t:
//   - a valid pool: what its schedules say;
//   - a pool with no configuration item (destroyed, or never configured): zero hot, zero stopped,
//     so the instances of a destroyed pool are scaled in;
//   - a pool whose item is present but invalid: an error, and its instances must be left as they
//     are (a spec this reconciler cannot read, for example one written by a newer provider, must not
//     empty a pool).
func (s Snapshot) Target(pool string, t time.Time) (schedule.Target, error) {
	if cal, ok := s.calendars[pool]; ok {
		return cal.At(t), nil
	}
	if _, stored := s.Versions[store.ConfigWarmPool][pool]; stored {
		for _, p := range s.Problems {
			if p.Kind == store.ConfigWarmPool && p.Name == pool {
				return schedule.Target{}, p
			}
		}
		return schedule.Target{}, fmt.Errorf("warm pool %q is not usable", pool)
	}
	return schedule.Target{Default: true}, nil
}

// Pools lists the valid warm pools by name.
func (s Snapshot) Pools() []WarmPool {
	out := make([]WarmPool, 0, len(s.WarmPools))
	for _, p := range s.WarmPools {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SpecHash is the spec hash of a warm pool of the snapshot.
func (s Snapshot) SpecHash(pool string) (string, bool) {
	p, ok := s.WarmPools[pool]
	if !ok {
		return "", false
	}
	return SpecHash(s.RunnerClasses[p.RunnerClass], p), true
}

// Load reads every runner class and warm pool (strongly consistent). It fails only when the table
// cannot be read; invalid items are reported in Snapshot.Problems and left out.
func (r *Repository) Load(ctx context.Context) (Snapshot, error) {
	snap := Snapshot{
		RunnerClasses: map[string]RunnerClass{},
		WarmPools:     map[string]WarmPool{},
		Versions:      map[store.ConfigKind]map[string]int64{store.ConfigRunnerClass: {}, store.ConfigWarmPool: {}},
		calendars:     map[string]*schedule.Calendar{},
	}
	problem := func(kind store.ConfigKind, name string, err error) {
		snap.Problems = append(snap.Problems, &ItemError{Kind: kind, Name: name, Err: err})
	}
	classes, err := r.st.ListConfig(ctx, store.ConfigRunnerClass)
	if err != nil {
		return Snapshot{}, fmt.Errorf("loading runner classes: %w", err)
	}
	pools, err := r.st.ListConfig(ctx, store.ConfigWarmPool)
	if err != nil {
		return Snapshot{}, fmt.Errorf("loading warm pools: %w", err)
	}
	bad := map[string]bool{}
	for _, it := range classes {
		snap.Versions[store.ConfigRunnerClass][it.Name] = it.Version
		rc, err := DecodeRunnerClass(it.Name, it.Spec)
		if err != nil {
			problem(store.ConfigRunnerClass, it.Name, err)
			bad[it.Name] = true
			continue
		}
		snap.RunnerClasses[it.Name] = rc
	}
	for _, it := range pools {
		snap.Versions[store.ConfigWarmPool][it.Name] = it.Version
		p, err := DecodeWarmPool(it.Name, it.Spec)
		switch {
		case err != nil:
			problem(store.ConfigWarmPool, it.Name, err)
		case bad[p.RunnerClass]:
			problem(store.ConfigWarmPool, it.Name, fmt.Errorf("warm pool %q: its runner class %q is invalid", p.Name, p.RunnerClass))
		case !hasKey(snap.RunnerClasses, p.RunnerClass):
			problem(store.ConfigWarmPool, it.Name, fmt.Errorf("warm pool %q: runner class %q: %w", p.Name, p.RunnerClass, ErrUnknownRunnerClass))
		default:
			cal, err := p.Calendar()
			if err != nil { // unreachable: DecodeWarmPool validated the schedules
				problem(store.ConfigWarmPool, it.Name, err)
				continue
			}
			snap.WarmPools[p.Name] = p
			snap.calendars[p.Name] = cal
		}
	}
	return snap, nil
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// GetRunnerClass reads one runner class and its version. A missing item is store.ErrNotFound.
func (r *Repository) GetRunnerClass(ctx context.Context, name string) (RunnerClass, int64, error) {
	it, err := r.st.GetConfig(ctx, store.ConfigRunnerClass, name)
	if err != nil {
		return RunnerClass{}, 0, err
	}
	rc, err := DecodeRunnerClass(name, it.Spec)
	return rc, it.Version, err
}

// GetWarmPool reads one warm pool and its version. A missing item is store.ErrNotFound.
func (r *Repository) GetWarmPool(ctx context.Context, name string) (WarmPool, int64, error) {
	it, err := r.st.GetConfig(ctx, store.ConfigWarmPool, name)
	if err != nil {
		return WarmPool{}, 0, err
	}
	p, err := DecodeWarmPool(name, it.Spec)
	return p, it.Version, err
}

// PutRunnerClass validates and writes a runner class. expectVersion 0 creates it (store.ErrConflict
// if it exists); a positive version must match the stored one (store.ErrConflict otherwise). It
// returns the new version.
func (r *Repository) PutRunnerClass(ctx context.Context, rc RunnerClass, expectVersion int64) (int64, error) {
	if err := rc.Validate(); err != nil {
		return 0, err
	}
	return r.put(ctx, store.ConfigRunnerClass, rc.Name, rc, expectVersion)
}

// PutWarmPool validates and writes a warm pool, after checking its runner class exists
// (ErrUnknownRunnerClass otherwise). Versions work as in PutRunnerClass.
func (r *Repository) PutWarmPool(ctx context.Context, p WarmPool, expectVersion int64) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if _, err := r.st.GetConfig(ctx, store.ConfigRunnerClass, p.RunnerClass); err != nil {
		if errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNoTable) {
			return 0, fmt.Errorf("warm pool %q: runner class %q: %w", p.Name, p.RunnerClass, ErrUnknownRunnerClass)
		}
		return 0, fmt.Errorf("warm pool %q: reading its runner class: %w", p.Name, err)
	}
	return r.put(ctx, store.ConfigWarmPool, p.Name, p, expectVersion)
}

func (r *Repository) put(ctx context.Context, kind store.ConfigKind, name string, v any, expectVersion int64) (int64, error) {
	spec, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encoding %s %q: %w", kind, name, err)
	}
	it, err := r.st.PutConfig(ctx, store.ConfigItem{Kind: kind, Name: name, Spec: spec}, expectVersion)
	if err != nil {
		return 0, err
	}
	return it.Version, nil
}

// DeleteRunnerClass deletes a runner class, refusing (ErrInUse) while warm pools name it. Deleting a
// missing item is not an error.
func (r *Repository) DeleteRunnerClass(ctx context.Context, name string) error {
	pools, err := r.st.ListConfig(ctx, store.ConfigWarmPool)
	if err != nil {
		return fmt.Errorf("deleting runner class %q: listing warm pools: %w", name, err)
	}
	var users []string
	for _, it := range pools {
		var ref struct {
			RunnerClass string `json:"runner_class"`
		}
		if json.Unmarshal(it.Spec, &ref) == nil && ref.RunnerClass == name {
			users = append(users, it.Name)
		}
	}
	if len(users) > 0 {
		slices.Sort(users)
		return fmt.Errorf("deleting runner class %q: warm pools %q use it: %w", name, users, ErrInUse)
	}
	return r.st.DeleteConfig(ctx, store.ConfigRunnerClass, name)
}

// DeleteWarmPool deletes a warm pool's configuration. The reconciler's next cycle finds the pool's
// instances without a pool configuration and scales them to zero. Deleting a missing item is not an
// error.
func (r *Repository) DeleteWarmPool(ctx context.Context, name string) error {
	return r.st.DeleteConfig(ctx, store.ConfigWarmPool, name)
}
