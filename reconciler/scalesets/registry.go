// The scale sets this deployment made at GitHub, so that one whose configuration is gone is
// deleted there too, whichever replica notices and whether or not its listener's holder is alive.

package scalesets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// registryKey is the run record listing the scale sets made at GitHub, by "scope/name".
const registryKey = "scaleset-registry"

// made is one scale set this deployment made (or adopted) at GitHub.
type made struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	ID    int64  `json:"id"`
}

// readRegistry returns the registry's entries and its record (zero when there is none yet).
func (m *Manager) readRegistry(ctx context.Context) (map[string]made, store.Run, error) {
	r, err := m.cfg.Store.GetRun(ctx, registryKey)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]made{}, store.Run{}, nil
	}
	if err != nil {
		return nil, store.Run{}, fmt.Errorf("reading the scale set registry: %w", err)
	}
	out := map[string]made{}
	if len(r.Result) > 0 {
		if err := json.Unmarshal(r.Result, &out); err != nil {
			// A damaged registry must not stop the listeners: start it again (the sets it named
			// stay at GitHub, as before the registry existed) and say so.
			m.log.Error("scale set registry unreadable: starting it again", "err", err)
			out = map[string]made{}
		}
	}
	return out, r, nil
}

// updateRegistry applies change to the registry under its version, retrying on a conflict with
// another replica's update.
func (m *Manager) updateRegistry(ctx context.Context, change func(map[string]made) bool) error {
	for attempt := 0; attempt < 5; attempt++ {
		entries, r, err := m.readRegistry(ctx)
		if err != nil {
			return err
		}
		if !change(entries) {
			return nil
		}
		body, _ := json.Marshal(entries)
		if r.Key == "" {
			_, created, err := m.cfg.Store.CreateRun(ctx, store.Run{Key: registryKey, Status: "registry", Result: body})
			if err != nil {
				return fmt.Errorf("writing the scale set registry: %w", err)
			}
			if created {
				return nil
			}
			continue // another replica created it first: apply the change to theirs
		}
		r.Result = body
		_, err = m.cfg.Store.UpdateRun(ctx, r, r.Version)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the scale set registry: %w", err)
		}
		return nil
	}
	return errors.New("writing the scale set registry: too many concurrent updates")
}

// register records a scale set made or found at GitHub for a configured set.
func (m *Manager) register(ctx context.Context, scope, name string, id int64) error {
	key := scope + "/" + name
	return m.updateRegistry(ctx, func(e map[string]made) bool {
		if e[key].ID == id {
			return false
		}
		e[key] = made{Scope: scope, Name: name, ID: id}
		return true
	})
}

// retire deletes at GitHub the scale sets this deployment made whose configuration is gone, then
// forgets them. A set whose jobs still run on instances of this deployment is kept until they end
// (its runners are busy; deleting it would strand their jobs' completions). Every replica may run
// it: each deletion is idempotent at GitHub.
func (m *Manager) retire(ctx context.Context, configured map[string]bool) {
	entries, _, err := m.readRegistry(ctx)
	if err != nil {
		m.log.Warn("scale sets not retired", "err", err)
		return
	}
	var broken []string
	if m.cfg.Broken != nil {
		broken = m.cfg.Broken()
	}
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		e := entries[key]
		if configured[key] {
			continue
		}
		if slices.Contains(broken, e.Name) {
			m.log.Warn("scale set configuration unreadable: not deleted at GitHub while it is", "scale_set", key)
			continue
		}
		if err := m.retireOne(ctx, e); err != nil {
			m.log.Warn("removed scale set not deleted at GitHub yet", "scale_set", key, "id", e.ID, "err", err)
			continue
		}
		if err := m.updateRegistry(ctx, func(cur map[string]made) bool {
			if cur[key].ID != e.ID {
				return false // made again since: keep the new one
			}
			delete(cur, key)
			return true
		}); err != nil {
			m.log.Warn("retired scale set not forgotten: deleted again next time", "scale_set", key, "err", err)
		}
	}
}

// errBusy: the scale set's runners still run jobs.
var errBusy = errors.New("its runners still run jobs")

func (m *Manager) retireOne(ctx context.Context, e made) error {
	c, err := m.client(e.Scope)
	if err != nil {
		return err
	}
	if busy, err := m.busy(ctx, e.ID); err != nil {
		return err
	} else if busy > 0 {
		return fmt.Errorf("%w (%d instances)", errBusy, busy)
	}
	if err := c.DeleteScaleSet(ctx, e.ID); err != nil && scaleset.StatusOf(err) != http.StatusNotFound {
		return err
	}
	m.metrics.inc(m.metrics.sessions, "sessions", e.Name, "deleted")
	m.log.Info("scale set deleted at GitHub: its configuration is gone", "scale_set", e.Scope+"/"+e.Name, "id", e.ID)
	return nil
}

// busy counts the live instances serving jobs of the scale set (any pool: the configuration that
// named the pool is gone).
func (m *Manager) busy(ctx context.Context, scaleSetID int64) (int, error) {
	recs, err := m.cfg.Store.Live(ctx)
	if err != nil {
		return 0, fmt.Errorf("counting the scale set's instances: %w", err)
	}
	return countServing(recs, scaleSetID), nil
}
