// Scale sets: a runner scale set at GitHub that feeds a warm pool with jobs through the Actions
// service's message queue instead of workflow_job webhooks (runs-on: <scale set name>). The
// reconciler creates and updates the scale set (name, runner group, labels) and holds its message
// session; the provider writes this item (runnerpool_scale_set).

package declared

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ErrUnknownWarmPool is returned when a scale set names a warm pool that is not configured.
var ErrUnknownWarmPool = errors.New("unknown warm pool")

// ScaleSet is one runner scale set feeding a warm pool.
type ScaleSet struct {
	// Name is the scale set's name at GitHub and the label workflows use (runs-on: NAME):
	// ValidateName's set, so it is also a safe key and label.
	Name string `json:"name"`
	// WarmPool is the warm pool whose instances serve its jobs.
	WarmPool string `json:"warm_pool"`
	// Scope is where the scale set lives: an organisation ("acme") or a repository ("acme/app").
	Scope string `json:"scope"`
	// RunnerGroup is the runner group of an organisation scale set ("default" when empty).
	RunnerGroup string `json:"runner_group,omitempty"`
	// Labels replace the default label (the name). github.com honours one label per scale set.
	Labels []string `json:"labels,omitempty"`
	// MaxRunners caps the runners the scale set asks for at once (X-ScaleSetMaxCapacity is this
	// minus the runners serving its jobs).
	MaxRunners int `json:"max_runners"`
}

// scopeRE matches OWNER or OWNER/REPO.
var scopeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}(/[A-Za-z0-9._-]{1,100})?$`)

// ValidateScope checks a scale set's scope: OWNER or OWNER/REPO.
func ValidateScope(s string) error {
	if !scopeRE.MatchString(s) || strings.HasSuffix(s, "/.") || strings.HasSuffix(s, "/..") {
		return fmt.Errorf("scope %q: want OWNER or OWNER/REPO", s)
	}
	return nil
}

// MaxScaleSetRunners bounds max_runners.
const MaxScaleSetRunners = 10000

// Validate reports every problem of the scale set as a *Problems, or nil.
func (s ScaleSet) Validate() error {
	var c collector
	c.add("name", ValidateName(s.Name))
	if err := ValidateName(s.WarmPool); err != nil {
		c.add("warm_pool", fmt.Errorf("warm pool: %w", err))
	}
	c.add("scope", ValidateScope(s.Scope))
	c.each("labels", s.Labels, ValidateLabel)
	if len(s.Labels) > MaxLabels {
		c.add("labels", fmt.Errorf("at most %d labels", MaxLabels))
	}
	if s.MaxRunners < 1 || s.MaxRunners > MaxScaleSetRunners {
		c.add("max_runners", fmt.Errorf("max_runners %d: between 1 and %d", s.MaxRunners, MaxScaleSetRunners))
	}
	return c.result("scale set", s.Name)
}

// ScaleSetLabels are the labels the scale set carries at GitHub: its name first, as ARC always
// keeps it (the name is the label workflows target: actions/scaleset README, "What is a Scale
// Set?"), then Labels other than the name.
func (s ScaleSet) ScaleSetLabels() []string {
	out := []string{s.Name}
	for _, l := range s.Labels {
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, l) }) {
			out = append(out, l)
		}
	}
	return out
}

// Group is the runner group's name ("default" when empty).
func (s ScaleSet) Group() string {
	if s.RunnerGroup == "" {
		return "default"
	}
	return s.RunnerGroup
}

// DecodeScaleSet decodes and validates the stored spec of the scale set named name.
func DecodeScaleSet(name string, spec []byte) (ScaleSet, error) {
	var s ScaleSet
	if err := decodeSpec(spec, &s); err != nil {
		return ScaleSet{}, fmt.Errorf("scale set %q: decoding its spec: %w", name, err)
	}
	if s.Name != name {
		return ScaleSet{}, fmt.Errorf("scale set %q: its spec names %q", name, s.Name)
	}
	return s, s.Validate()
}

// GetScaleSet reads one scale set and its version. A missing item is store.ErrNotFound.
func (r *Repository) GetScaleSet(ctx context.Context, name string) (ScaleSet, int64, error) {
	it, err := r.st.GetConfig(ctx, store.ConfigScaleSet, name)
	if err != nil {
		return ScaleSet{}, 0, err
	}
	s, err := DecodeScaleSet(name, it.Spec)
	return s, it.Version, err
}

// PutScaleSet validates and writes a scale set after checking its warm pool exists
// (ErrUnknownWarmPool otherwise). Versions work as in PutRunnerClass.
func (r *Repository) PutScaleSet(ctx context.Context, s ScaleSet, expectVersion int64) (int64, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if _, err := r.st.GetConfig(ctx, store.ConfigWarmPool, s.WarmPool); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, fmt.Errorf("scale set %q: warm pool %q: %w", s.Name, s.WarmPool, ErrUnknownWarmPool)
		}
		return 0, fmt.Errorf("scale set %q: reading its warm pool: %w", s.Name, err)
	}
	return r.put(ctx, store.ConfigScaleSet, s.Name, s, expectVersion)
}

// DeleteScaleSet deletes a scale set's configuration: the listener lets go of its session. Deleting
// a missing item is not an error.
func (r *Repository) DeleteScaleSet(ctx context.Context, name string) error {
	return r.st.DeleteConfig(ctx, store.ConfigScaleSet, name)
}

// ScaleSets lists the valid scale sets; invalid items are returned as problems, never hiding the
// others.
func (r *Repository) ScaleSets(ctx context.Context) ([]ScaleSet, []*ItemError, error) {
	items, err := r.st.ListConfig(ctx, store.ConfigScaleSet)
	if err != nil {
		return nil, nil, fmt.Errorf("loading scale sets: %w", err)
	}
	var out []ScaleSet
	var problems []*ItemError
	for _, it := range items {
		s, err := DecodeScaleSet(it.Name, it.Spec)
		if err != nil {
			problems = append(problems, &ItemError{Kind: store.ConfigScaleSet, Name: it.Name, Err: err})
			continue
		}
		out = append(out, s)
	}
	return out, problems, nil
}
