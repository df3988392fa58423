// Upgrades in any order (docs/upgrading.md): the configuration this commit's provider writes is read
// by the previous release's reconciler, and this reconciler reads what a newer provider writes.
package declared

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// previousRelease is the commit whose decoders stand for the release before this one: the last
// commit with strict decoding (an unknown field refused the item). Move it to the last release's tag
// once releases are tagged; the test needs the repository's history (a full clone).
const previousRelease = "cc50e7de21a3abbcbd572bb0f6ee3670e6c7d2ec"

// captureStore is a Store that keeps what the repository writes, so a test sees the exact bytes the
// provider's Create and Update store (they call Repository.Put*).
type captureStore struct{ items map[string]store.ConfigItem }

func (s *captureStore) PutConfig(_ context.Context, it store.ConfigItem, _ int64) (store.ConfigItem, error) {
	it.Version = 1
	s.items[string(it.Kind)+"/"+it.Name] = it
	return it, nil
}

func (s *captureStore) GetConfig(_ context.Context, kind store.ConfigKind, name string) (store.ConfigItem, error) {
	if it, ok := s.items[string(kind)+"/"+name]; ok {
		return it, nil
	}
	return store.ConfigItem{}, store.ErrNotFound
}

func (s *captureStore) ListConfig(context.Context, store.ConfigKind) ([]store.ConfigItem, error) {
	return nil, nil
}

func (s *captureStore) DeleteConfig(context.Context, store.ConfigKind, string) error { return nil }

// writtenSpecs are the items this commit writes for a configuration using every field the previous
// release knew: a runner class with all of them set, a warm pool with matched schedules, a scale set.
func writtenSpecs(t *testing.T) []store.ConfigItem {
	t.Helper()
	// Every field the previous release knew, set; nothing newer (a newer field is written only when
	// set, so this is what a configuration that uses no new setting stores).
	rc := RunnerClass{
		Name: "small-x64", Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096,
		InstanceTypes: []string{"t3.*", "m7i.large"},
		Volume:        Volume{Type: VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass:    UsageOnDemand, Subnets: []string{"subnet-0123456789abcdef0"},
		SecurityGroups: []string{"sg-0123456789abcdef0"}, InstanceProfile: "runnerpool-runner",
		PreRunnerScript: "#!/bin/bash\ntrue\n", Labels: []string{"linux"},
		MaxRuntime: Duration(6 * time.Hour), IdleTime: Duration(10 * time.Minute),
		LaunchTemplateID: "lt-0123456789abcdef0",
		QueueURL:         "https://sqs.eu-west-1.amazonaws.com/123456789012/runnerpool-small-x64",
		Tags:             map[string]string{"team": "platform"}, MaxInstances: 20,
		JobAccess: JobAccessUser, Reuse: ReuseSameRepository,
	}
	p := WarmPool{
		Name: "small-x64", RunnerClass: rc.Name, Environment: "dev", Timezone: "Europe/Paris",
		Schedules: []schedule.Schedule{
			{Name: "default", Hot: 1, Stopped: 2},
			{Name: "weekends", Match: &schedule.Match{Days: []string{"saturday", "sunday"}, Times: []schedule.TimeRange{{Start: "22:00", End: "06:00"}}}, Stopped: 2},
		},
	}
	ss := ScaleSet{Name: "linux", WarmPool: p.Name, Scope: "acme", RunnerGroup: "ci", Labels: []string{"linux"}, MaxRunners: 10}
	st := &captureStore{items: map[string]store.ConfigItem{}}
	repo := NewRepository(st)
	ctx := t.Context()
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.PutWarmPool(ctx, p, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.PutScaleSet(ctx, ss, 0); err != nil {
		t.Fatal(err)
	}
	var out []store.ConfigItem
	for _, k := range []store.ConfigKind{store.ConfigRunnerClass, store.ConfigWarmPool, store.ConfigScaleSet} {
		out = append(out, st.items[string(k)+"/"+map[store.ConfigKind]string{store.ConfigRunnerClass: rc.Name, store.ConfigWarmPool: p.Name, store.ConfigScaleSet: ss.Name}[k]])
	}
	return out
}

// oldReaderMain is a program built inside the previous release's tree: it decodes each item with
// that release's decoder and prints the decoded value (or the error) as JSON. It imports the package
// by the previous release's path, internal/config: once previousRelease has internal/declared, so
// must this program.
const oldReaderMain = `package main

import (
	"encoding/json"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/config"
)

type item struct{ Kind, Name string; Spec json.RawMessage }

func main() {
	var in []item
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	var out []map[string]any
	for _, it := range in {
		var v any
		var err error
		switch it.Kind {
		case "runner_class":
			v, err = config.DecodeRunnerClass(it.Name, it.Spec)
		case "warm_pool":
			v, err = config.DecodeWarmPool(it.Name, it.Spec)
		case "scale_set":
			v, err = config.DecodeScaleSet(it.Name, it.Spec)
		}
		r := map[string]any{"value": v}
		if err != nil {
			r["error"] = err.Error()
		}
		out = append(out, r)
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
`

// buildOldReader extracts the previous release's module (go.mod, go.sum, internal/) into a temporary
// folder and builds oldReaderMain there, with the module cache the tests already use.
func buildOldReader(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archive := exec.CommandContext(t.Context(), "git", "-C", root, "archive", "--format=tar", previousRelease, "go.mod", "go.sum", "internal")
	untar := exec.CommandContext(t.Context(), "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the previous release; the test needs a full clone): %v\n%s", previousRelease, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("unpacking the previous release: %v", err)
	}
	main := filepath.Join(dir, "internal", "zzoldreader")
	if err := os.MkdirAll(main, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(main, "main.go"), []byte(oldReaderMain), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "oldreader")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./internal/zzoldreader")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release's decoder: %v\n%s", err, out)
	}
	t.Logf("previous release's decoder built in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// TestPreviousReleaseReadsThisProvider: every item this commit's provider writes (through the
// repository, as its resources do) for a configuration the previous release could express is read
// by the previous release's decoder, to the same values. A field added without omitempty, or a
// renamed one, fails here: the older reconciler would drop the item.
func TestPreviousReleaseReadsThisProvider(t *testing.T) {
	t.Parallel()
	items := writtenSpecs(t)
	bin := buildOldReader(t)
	in, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("previous release's decoder: %v", err)
	}
	var got []struct {
		Value map[string]any `json:"value"`
		Error string         `json:"error"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(items) {
		t.Fatalf("previous release's decoder printed %s (%v)", out, err)
	}
	for i, it := range items {
		if got[i].Error != "" {
			t.Errorf("%s %q: the previous release refuses what this provider writes: %s\nspec: %s", it.Kind, it.Name, got[i].Error, it.Spec)
			continue
		}
		var want map[string]any
		if err := json.Unmarshal(decodedNow(t, it), &want); err != nil {
			t.Fatal(err)
		}
		for k, v := range got[i].Value {
			if !reflect.DeepEqual(want[k], v) {
				t.Errorf("%s %q: field %s read by the previous release as %v, written as %v", it.Kind, it.Name, k, v, want[k])
			}
		}
	}
}

// decodedNow decodes an item with this commit's decoder and encodes the value again.
func decodedNow(t *testing.T, it store.ConfigItem) []byte {
	t.Helper()
	v, err := decode(it)
	if err != nil {
		t.Fatalf("%s %q: %v", it.Kind, it.Name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadsNewerProvider: a spec carrying fields this reconciler does not know (a newer provider's,
// at the top level and nested) is read for the fields it knows, unless the spec requires one of them.
func TestReadsNewerProvider(t *testing.T) {
	t.Parallel()
	extend := func(spec []byte, extra string) []byte {
		return []byte(strings.TrimSuffix(string(spec), "}") + "," + extra + "}")
	}
	for _, it := range writtenSpecs(t) {
		t.Run(string(it.Kind), func(t *testing.T) {
			t.Parallel()
			want := decodedNow(t, it)
			newer := it
			newer.Spec = extend(it.Spec, `"spot_hot":true,"forecast":{"target":0.7},"requires":["name"]`)
			if got := decodedNow(t, newer); string(got) != string(want) {
				t.Errorf("with unknown fields read as %s, want %s", got, want)
			}
			newer.Spec = extend(it.Spec, `"spot_hot":true,"requires":["spot_hot"]`)
			if _, err := decode(newer); err == nil || !strings.Contains(err.Error(), `requires fields this reconciler does not know: ["spot_hot"]`) {
				t.Errorf("a required unknown field: %v, want the item refused naming it", err)
			}
		})
	}
	p := validPool()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	nested := strings.Replace(string(b), `"stopped":2`, `"stopped":2,"spot":true`, 1)
	got, err := DecodeWarmPool(p.Name, []byte(nested))
	if err != nil || !reflect.DeepEqual(got.Schedules, p.Schedules) {
		t.Errorf("a pool with an unknown schedule field: %+v, %v; want the schedules as written", got.Schedules, err)
	}
}

// decode decodes an item of any kind.
func decode(it store.ConfigItem) (any, error) {
	switch it.Kind {
	case store.ConfigRunnerClass:
		return DecodeRunnerClass(it.Name, it.Spec)
	case store.ConfigWarmPool:
		return DecodeWarmPool(it.Name, it.Spec)
	case store.ConfigScaleSet:
		return DecodeScaleSet(it.Name, it.Spec)
	}
	return nil, fmt.Errorf("kind %q", it.Kind)
}
