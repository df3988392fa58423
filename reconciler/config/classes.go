// The runner classes file: where runners of each class come from (pool queue, launch template,
// subnets) and the named resource classes, as JSON decoded strictly. It is optional: without it the
// reconciler takes runner classes from the state table (written by the Terraform provider), with
// --default-runner-class and --resource-classes for the rest.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// Classes is the content of the runner classes file.
//
//	{
//	  "default_runner_class": "linux",
//	  "resource_classes": {"small": {"cpu": 2, "memory_mib": 4096}},
//	  "runner_classes": {
//	    "linux": {
//	      "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/runnerpool-linux",
//	      "launch_template_id": "lt-0123456789abcdef0",
//	      "subnets": ["subnet-aaa", "subnet-bbb"],
//	      "tags": {"team": "ci"},
//	      "max_runtime": "6h",
//	      "idle_time": "30m"
//	    }
//	  }
//	}
type Classes struct {
	DefaultRunnerClass string                   `json:"default_runner_class,omitempty"`
	ResourceClasses    map[string]ResourceClass `json:"resource_classes,omitempty"`
	RunnerClasses      map[string]ClassEntry    `json:"runner_classes"`
}

// ResourceClass is a named minimum size.
type ResourceClass struct {
	CPU       int `json:"cpu"`
	MemoryMiB int `json:"memory_mib"`
}

// ClassEntry is one runner class of the file, as written: where runners of the class come from.
// It is an edge format only: Class converts it to the runner class (internal/declared) that
// provisions work with, as the state table's items are.
type ClassEntry struct {
	QueueURL         string `json:"queue_url"`
	LaunchTemplateID string `json:"launch_template_id"`
	// LaunchTemplateVersion is the version CreateFleet launches: a number, "$Default" or "$Latest";
	// empty means "$Default" (TemplateVersion).
	LaunchTemplateVersion string            `json:"launch_template_version,omitempty"`
	Subnets               []string          `json:"subnets"`
	Tags                  map[string]string `json:"tags,omitempty"`
	MaxRuntime            Duration          `json:"max_runtime,omitzero"`
	IdleTime              Duration          `json:"idle_time,omitzero"`
	// InstanceTypes, UsageClass and Labels say what the class's runners are, as a table runner
	// class's do: a provision may narrow them, never widen them. Empty: the request chooses.
	InstanceTypes []string `json:"instance_types,omitempty"`
	UsageClass    string   `json:"usage_class,omitempty"`
	Labels        []string `json:"labels,omitempty"`
	// MaxInstances caps the class's own share of the deployment's instances; absent: no cap of
	// its own. When given it must be positive.
	MaxInstances *int `json:"max_instances,omitempty"`
}

// Class is the entry as the runner class named name. What the file cannot say (image, size,
// posture) stays empty: such a class launches whatever its launch template says, and its
// instances are recorded without a job access, as they always were.
func (rc ClassEntry) Class(name string) declared.RunnerClass {
	c := declared.RunnerClass{
		Name: name, QueueURL: rc.QueueURL, LaunchTemplateID: rc.LaunchTemplateID,
		Subnets: slices.Clone(rc.Subnets), Tags: maps.Clone(rc.Tags),
		MaxRuntime: declared.Duration(rc.MaxRuntime), IdleTime: declared.Duration(rc.IdleTime),
		InstanceTypes: slices.Clone(rc.InstanceTypes), UsageClass: rc.UsageClass, Labels: slices.Clone(rc.Labels),
	}
	if rc.MaxInstances != nil {
		c.MaxInstances = *rc.MaxInstances
	}
	return c
}

// TemplateVersion is the launch template version the class launches: LaunchTemplateVersion, or
// "$Default" when it is empty (CreateFleet itself has no default and must be given one).
func (rc ClassEntry) TemplateVersion() string {
	if rc.LaunchTemplateVersion == "" {
		return "$Default"
	}
	return rc.LaunchTemplateVersion
}

// Duration is a time.Duration written as a Go duration string ("30m") in JSON.
type Duration time.Duration

// UnmarshalJSON reads "30m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "30m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadClasses reads and validates a runner classes file.
func LoadClasses(path string) (Classes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Classes{}, err
	}
	return ParseClasses(b)
}

// ParseClasses decodes a runner classes document strictly (unknown fields are errors) and
// validates it, listing every problem.
func ParseClasses(b []byte) (Classes, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Classes
	if err := dec.Decode(&c); err != nil {
		return Classes{}, fmt.Errorf("runner classes: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Classes{}, errors.New("runner classes: trailing data after the JSON object")
	}
	return c, c.Validate()
}

// Validate lists every problem of the document.
func (c Classes) Validate() error {
	var errs []error
	if len(c.RunnerClasses) == 0 {
		errs = append(errs, errors.New("no runner classes"))
	}
	names := make([]string, 0, len(c.RunnerClasses))
	for n := range c.RunnerClasses {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		rc := c.RunnerClasses[n]
		if u, err := url.Parse(rc.QueueURL); err != nil || u.Host == "" {
			errs = append(errs, fmt.Errorf("runner class %q: queue_url %q is not a URL", n, rc.QueueURL))
		} else if err := declared.RefuseFIFOPool(rc.QueueURL); err != nil {
			errs = append(errs, fmt.Errorf("runner class %q: queue_url: %w", n, err))
		}
		if rc.LaunchTemplateID == "" {
			errs = append(errs, fmt.Errorf("runner class %q: launch_template_id is required", n))
		}
		if err := fleet.ValidateTemplateVersion(rc.TemplateVersion()); err != nil {
			errs = append(errs, fmt.Errorf("runner class %q: launch_template_version: %w", n, err))
		}
		if len(rc.Subnets) == 0 {
			errs = append(errs, fmt.Errorf("runner class %q: at least one subnet is required", n))
		}
		for _, p := range rc.InstanceTypes {
			if err := instancetype.ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("runner class %q: instance_types: %w", n, err))
			}
		}
		if rc.UsageClass != "" {
			if err := declared.ValidateUsageClass(rc.UsageClass); err != nil {
				errs = append(errs, fmt.Errorf("runner class %q: %w", n, err))
			}
		}
		for _, l := range rc.Labels {
			if err := declared.ValidateLabel(l); err != nil {
				errs = append(errs, fmt.Errorf("runner class %q: labels: %w", n, err))
			}
		}
		if rc.MaxInstances != nil && *rc.MaxInstances <= 0 {
			errs = append(errs, fmt.Errorf("runner class %q: max_instances %d: want a positive number (leave it out for no cap)", n, *rc.MaxInstances))
		}
		// Instance tags: the launch templates enable instance metadata tags (the claim notice), and
		// EC2 then refuses keys with spaces or "/".
		if err := declared.ValidateTags(rc.Tags); err != nil {
			errs = append(errs, fmt.Errorf("runner class %q: tags: %w", n, err))
		}
	}
	if c.DefaultRunnerClass != "" {
		if _, ok := c.RunnerClasses[c.DefaultRunnerClass]; !ok {
			errs = append(errs, fmt.Errorf("default_runner_class %q is not a runner class", c.DefaultRunnerClass))
		}
	}
	for n, r := range c.ResourceClasses {
		if r.CPU < 0 || r.MemoryMiB < 0 || (r.CPU == 0 && r.MemoryMiB == 0) {
			errs = append(errs, fmt.Errorf("resource class %q: cpu and memory_mib must not be negative, and not both zero", n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner classes: %w", err)
	}
	return nil
}
