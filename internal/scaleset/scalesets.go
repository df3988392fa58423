// Scale sets, runner groups, JIT runner configurations and runner removal: the admin calls of the
// Actions service. JSON names are the service's (camelCase, "value" lists with a "count").

package scaleset

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Label is a scale set label; the service wants a type ("System" for the labels a scale set is
// created with).
type Label struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// ScaleSet is a runner scale set as the service holds it.
type ScaleSet struct {
	ID              int64      `json:"id,omitempty"`
	Name            string     `json:"name,omitempty"`
	RunnerGroupID   int64      `json:"runnerGroupId,omitempty"`
	RunnerGroupName string     `json:"runnerGroupName,omitempty"`
	Labels          []Label    `json:"labels,omitempty"`
	RunnerSetting   Setting    `json:"RunnerSetting"`
	CreatedOn       time.Time  `json:"createdOn,omitzero"`
	Statistics      *Statistic `json:"statistics,omitempty"`
}

// Setting is a scale set's runner setting.
type Setting struct {
	DisableUpdate bool `json:"disableUpdate,omitempty"`
}

// LabelNames returns the scale set's label names.
func (s ScaleSet) LabelNames() []string {
	out := make([]string, len(s.Labels))
	for i, l := range s.Labels {
		out[i] = l.Name
	}
	return out
}

// Statistic is the service's count of a scale set's jobs and runners, sent with sessions and
// messages.
type Statistic struct {
	TotalAvailableJobs     int `json:"totalAvailableJobs"`
	TotalAcquiredJobs      int `json:"totalAcquiredJobs"`
	TotalAssignedJobs      int `json:"totalAssignedJobs"`
	TotalRunningJobs       int `json:"totalRunningJobs"`
	TotalRegisteredRunners int `json:"totalRegisteredRunners"`
	TotalBusyRunners       int `json:"totalBusyRunners"`
	TotalIdleRunners       int `json:"totalIdleRunners"`
}

// RunnerGroup is a runner group as the Actions service lists it.
type RunnerGroup struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Size      int    `json:"size"`
	IsDefault bool   `json:"isDefaultGroup"`
}

// DefaultRunnerGroup is the name of the group every scope has.
const DefaultRunnerGroup = "default"

type list[T any] struct {
	Count int `json:"count"`
	Value []T `json:"value"`
}

// RunnerGroupByName finds a runner group by name (case-insensitively at the service).
func (c *Client) RunnerGroupByName(ctx context.Context, name string) (RunnerGroup, error) {
	var l list[RunnerGroup]
	if err := c.call(ctx, "get runner group "+name, http.MethodGet, groupsPath, url.Values{"groupName": {name}}, nil, http.StatusOK, &l); err != nil {
		return RunnerGroup{}, err
	}
	switch len(l.Value) {
	case 1:
		return l.Value[0], nil
	case 0:
		return RunnerGroup{}, &Error{Op: "get runner group " + name, Status: http.StatusNotFound, Message: "no runner group named " + name}
	}
	return RunnerGroup{}, fmt.Errorf("get runner group %s: %d groups answer to that name", name, len(l.Value))
}

// GetScaleSet finds a scale set by name in a runner group; ok is false when there is none.
func (c *Client) GetScaleSet(ctx context.Context, runnerGroupID int64, name string) (_ ScaleSet, ok bool, _ error) {
	var l list[ScaleSet]
	q := url.Values{"runnerGroupId": {strconv.FormatInt(runnerGroupID, 10)}, "name": {name}}
	if err := c.call(ctx, "get scale set "+name, http.MethodGet, scaleSetsPath, q, nil, http.StatusOK, &l); err != nil {
		return ScaleSet{}, false, err
	}
	switch len(l.Value) {
	case 0:
		return ScaleSet{}, false, nil
	case 1:
		return l.Value[0], true, nil
	}
	return ScaleSet{}, false, fmt.Errorf("get scale set %s: %d scale sets answer to that name", name, len(l.Value))
}

// GetScaleSetByID reads a scale set.
func (c *Client) GetScaleSetByID(ctx context.Context, id int64) (ScaleSet, error) {
	var s ScaleSet
	err := c.call(ctx, fmt.Sprintf("get scale set %d", id), http.MethodGet, fmt.Sprintf("%s/%d", scaleSetsPath, id), nil, nil, http.StatusOK, &s)
	return s, err
}

// withLabels gives a scale set its name as label when it has none, and a type to every label.
func withLabels(s ScaleSet) ScaleSet {
	if len(s.Labels) == 0 {
		s.Labels = []Label{{Name: s.Name}}
	}
	ls := make([]Label, len(s.Labels))
	for i, l := range s.Labels {
		if l.Type == "" {
			l.Type = "System"
		}
		ls[i] = l
	}
	s.Labels = ls
	return s
}

// CreateScaleSet creates a scale set (names are unique within a runner group).
func (c *Client) CreateScaleSet(ctx context.Context, s ScaleSet) (ScaleSet, error) {
	if strings.TrimSpace(s.Name) == "" {
		return ScaleSet{}, fmt.Errorf("create scale set: name is required")
	}
	var out ScaleSet
	err := c.call(ctx, "create scale set "+s.Name, http.MethodPost, scaleSetsPath, nil, withLabels(s), http.StatusOK, &out)
	return out, err
}

// UpdateScaleSet changes a scale set's name, group or labels.
func (c *Client) UpdateScaleSet(ctx context.Context, id int64, s ScaleSet) (ScaleSet, error) {
	var out ScaleSet
	err := c.call(ctx, fmt.Sprintf("update scale set %d", id), http.MethodPatch, fmt.Sprintf("%s/%d", scaleSetsPath, id), nil, withLabels(s), http.StatusOK, &out)
	return out, err
}

// DeleteScaleSet deletes a scale set.
func (c *Client) DeleteScaleSet(ctx context.Context, id int64) error {
	return c.call(ctx, fmt.Sprintf("delete scale set %d", id), http.MethodDelete, fmt.Sprintf("%s/%d", scaleSetsPath, id), nil, nil, http.StatusNoContent, nil)
}

// JITConfig is a just-in-time runner of a scale set: the runner exists at the service from now,
// takes one job of the scale set and is removed after it. Encoded is what the runner starts with.
type JITConfig struct {
	RunnerID   int64
	RunnerName string
	Encoded    string
}

// GenerateJITConfig creates a runner named name in the scale set and returns its configuration.
func (c *Client) GenerateJITConfig(ctx context.Context, scaleSetID int64, name, workFolder string) (JITConfig, error) {
	if workFolder == "" {
		workFolder = "_work"
	}
	var out struct {
		Runner struct {
			ID               int64  `json:"id"`
			Name             string `json:"name"`
			RunnerScaleSetID int64  `json:"runnerScaleSetId"`
		} `json:"runner"`
		Encoded string `json:"encodedJITConfig"`
	}
	in := map[string]string{"name": name, "workFolder": workFolder}
	if err := c.call(ctx, "generate JIT config "+name, http.MethodPost, fmt.Sprintf("%s/%d/generatejitconfig", scaleSetsPath, scaleSetID), nil, in, http.StatusOK, &out); err != nil {
		return JITConfig{}, err
	}
	if out.Encoded == "" || out.Runner.ID == 0 {
		return JITConfig{}, fmt.Errorf("generate JIT config %s: answer without runner or configuration", name)
	}
	return JITConfig{RunnerID: out.Runner.ID, RunnerName: out.Runner.Name, Encoded: out.Encoded}, nil
}

// RemoveRunner removes a runner (withdraws a JIT configuration that was never used). A runner
// already gone is not an error.
func (c *Client) RemoveRunner(ctx context.Context, runnerID int64) error {
	err := c.call(ctx, fmt.Sprintf("remove runner %d", runnerID), http.MethodDelete, fmt.Sprintf("%s/%d", agentsPath, runnerID), nil, nil, http.StatusNoContent, nil)
	if StatusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}
