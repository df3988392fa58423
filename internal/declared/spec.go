// The stored form of runner classes and warm pools: JSON read tolerantly (a field this reader does not
// know is ignored, unless the spec lists it as required; see decodeSpec), and the spec hash that tags
// warm-pool instances for rollouts.
package declared

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
)

// Duration is a time.Duration stored in JSON as a Go duration string in its short form ("6h",
// "1h30m", "10m"; see FormatDuration).
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(FormatDuration(time.Duration(d)))
}

// FormatDuration is time.Duration.String without zero trailing units: "6h" rather than "6h0m0s",
// the way people write durations in Terraform.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// UnmarshalJSON reads a duration string such as "90m" or "6h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"6h\" or \"90m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Std is the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// decodeSpec decodes exactly one JSON value into v (a pointer to a struct), tolerating fields it
// does not know: a spec written by a newer provider, with a field this reader predates, is read for
// what this reader knows, so the provider and the reconciler can be upgraded in any order
// (docs/upgrading.md). A field whose meaning must not be missed (one that restricts what instances
// may do, say) is named by the writer in the spec's "requires" list, as a JSON path of field names
// ("reuse", "schedules.warm"); a reader that does not know a field listed there refuses the whole
// spec, so the item is left out as it was under strict decoding. Trailing data is refused.
func decodeSpec(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the spec")
	}
	var req struct {
		Requires []string `json:"requires"`
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return fmt.Errorf("requires: %w", err)
	}
	var unknown []string
	for _, p := range req.Requires {
		if !knowsField(reflect.TypeOf(v), strings.Split(p, ".")) {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("the spec requires fields this reconciler does not know: %q (upgrade the reconciler)", unknown)
	}
	return nil
}

// knowsField reports whether the JSON path of field names exists in t (through pointers, slices,
// arrays and maps to structs).
func knowsField(t reflect.Type, path []string) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if len(path) == 0 {
		return true
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	if path[0] == "requires" && len(path) == 1 {
		return true
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && knowsField(f.Type, path) {
			return true // an embedded struct's fields are the outer object's
		}
		if f.IsExported() && name != "-" && cmp.Or(name, f.Name) == path[0] {
			return knowsField(f.Type, path[1:])
		}
	}
	return false
}

// DecodeRunnerClass decodes and validates the stored spec of the runner class named name.
func DecodeRunnerClass(name string, spec []byte) (RunnerClass, error) {
	var rc RunnerClass
	if err := decodeSpec(spec, &rc); err != nil {
		return RunnerClass{}, fmt.Errorf("runner class %q: decoding its spec: %w", name, err)
	}
	if rc.Name != name {
		return RunnerClass{}, fmt.Errorf("runner class %q: its spec names %q", name, rc.Name)
	}
	if err := rc.Validate(); err != nil {
		return RunnerClass{}, err
	}
	return rc, nil
}

// DecodeWarmPool decodes and validates the stored spec of the warm pool named name.
func DecodeWarmPool(name string, spec []byte) (WarmPool, error) {
	var p WarmPool
	if err := decodeSpec(spec, &p); err != nil {
		return WarmPool{}, fmt.Errorf("warm pool %q: decoding its spec: %w", name, err)
	}
	if p.Name != name {
		return WarmPool{}, fmt.Errorf("warm pool %q: its spec names %q", name, p.Name)
	}
	if err := p.Validate(); err != nil {
		return WarmPool{}, err
	}
	return p, nil
}

// hashedPool is the part of a warm pool that changes what its instances are. Timezone and schedules
// change only how many there are, so they are left out: retuning a schedule never replaces warm
// instances.
type hashedPool struct {
	Name        string `json:"name"`
	RunnerClass string `json:"runner_class"`
	Environment string `json:"environment"`
}

// hashedClass is the part of a runner class an instance is launched or warmed with. MaxRuntime and
// IdleTime are thresholds the reconciler and the agent read from the record on every use, and the
// queue URL is where idle instances are announced: changing those needs no new instances.
type hashedClass struct {
	Name             string   `json:"name"`
	Image            string   `json:"image"`
	CPU              int      `json:"cpu"`
	MemoryMiB        int      `json:"memory_mib"`
	InstanceTypes    []string `json:"instance_types"`
	Volume           Volume   `json:"volume"`
	UsageClass       string   `json:"usage_class"`
	Subnets          []string `json:"subnets"`
	SecurityGroups   []string `json:"security_groups"`
	InstanceProfile  string   `json:"instance_profile"`
	PreRunnerScript  string   `json:"pre_runner_script"`
	Labels           []string `json:"labels"`
	LaunchTemplateID string   `json:"launch_template_id"`
	JobAccess        string   `json:"job_access,omitempty"` // omitempty: classes without them keep their hash
	Reuse            string   `json:"reuse,omitempty"`
}

// specHashVersion prefixes every hash, so a change of what is hashed is a deliberate, visible
// rollout rather than a silent one.
const specHashVersion = "v1-"

// SpecHash is the stable hash of what a warm pool's instances are made of: the runner class
// (including its image) and the pool's identity. The reconciler tags every warm instance with it
// (tags.SpecHash) and replaces instances whose tag differs. Lists that are sets (instance types,
// subnets, security groups, labels) are sorted first, so reordering them changes nothing.
func SpecHash(rc RunnerClass, p WarmPool) string {
	n := rc.normalized()
	b, err := json.Marshal(struct {
		Class hashedClass `json:"class"`
		Pool  hashedPool  `json:"pool"`
	}{
		Class: hashedClass{
			Name: n.Name, Image: n.Image, CPU: n.CPU, MemoryMiB: n.MemoryMiB, InstanceTypes: n.InstanceTypes,
			Volume: n.Volume, UsageClass: n.UsageClass, Subnets: n.Subnets, SecurityGroups: n.SecurityGroups,
			InstanceProfile: n.InstanceProfile, PreRunnerScript: n.PreRunnerScript, Labels: n.Labels,
			LaunchTemplateID: n.LaunchTemplateID, JobAccess: n.JobAccess, Reuse: n.Reuse,
		},
		Pool: hashedPool{Name: p.Name, RunnerClass: p.RunnerClass, Environment: p.Environment},
	})
	if err != nil {
		panic(fmt.Sprintf("config: marshalling spec hash input: %v", err)) // plain structs of strings and ints
	}
	sum := sha256.Sum256(b)
	return specHashVersion + hex.EncodeToString(sum[:16])
}
