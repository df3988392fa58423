// Package actionrun runs a composite action's steps (action.yml, runs.using: composite) the way the
// GitHub Actions runner does, for tests that call the actions of examples/github-actions as a
// workflow calls them. What the runner does is from GitHub's documentation: "Metadata syntax for
// GitHub Actions" (runs.steps, inputs' defaults, outputs from steps.ID.outputs), "Workflow commands"
// (GITHUB_OUTPUT's name=value and name<<DELIMITER forms; GITHUB_PATH lines prepended to PATH for
// the later steps) and "shell: bash", run as `bash --noprofile --norc -eo pipefail FILE`;
// GITHUB_ACTION_PATH is the action's directory. Expressions are limited to what those actions use:
// inputs.NAME, A || B, steps.ID.outputs.NAME; anything else is an error, not a guess. Test code only.
package actionrun

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Action is a composite action's metadata.
type Action struct {
	Dir    string `yaml:"-"`
	Inputs map[string]struct {
		Default  string `yaml:"default"`
		Required bool   `yaml:"required"`
	} `yaml:"inputs"`
	Outputs map[string]struct {
		Value string `yaml:"value"`
	} `yaml:"outputs"`
	Runs struct {
		Using string `yaml:"using"`
		Steps []Step `yaml:"steps"`
	} `yaml:"runs"`
}

// Step is one step of a composite action.
type Step struct {
	ID    string            `yaml:"id"`
	Shell string            `yaml:"shell"`
	Env   map[string]string `yaml:"env"`
	Run   string            `yaml:"run"`
}

// Load reads dir/action.yml.
func Load(dir string) (*Action, error) {
	b, err := os.ReadFile(filepath.Join(dir, "action.yml"))
	if err != nil {
		return nil, err
	}
	a := &Action{}
	if err := yaml.Unmarshal(b, a); err != nil {
		return nil, fmt.Errorf("%s/action.yml: %w", dir, err)
	}
	if a.Runs.Using != "composite" {
		return nil, fmt.Errorf("%s/action.yml: runs.using %q, not composite", dir, a.Runs.Using)
	}
	if a.Dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	return a, nil
}

// Only is the action with only the steps of these ids, in their order (a test of one step).
func (a *Action) Only(ids ...string) *Action {
	b := *a
	b.Runs.Steps = nil
	for _, s := range a.Runs.Steps {
		if slices.Contains(ids, s.ID) {
			b.Runs.Steps = append(b.Runs.Steps, s)
		}
	}
	b.Outputs = nil
	return &b
}

var expr = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

// Run runs the steps with the inputs with (each missing one at its default; a required one
// missing is an error) in the environment env (the runner's: PATH, HOME, RUNNER_*, ...), and
// returns the action's outputs. Its steps' output (stdout and stderr) goes to log.
func (a *Action) Run(ctx context.Context, with map[string]string, env []string, log *bytes.Buffer) (map[string]string, error) {
	inputs := map[string]string{}
	for name, in := range a.Inputs {
		v, ok := with[name]
		if !ok {
			if in.Required {
				return nil, fmt.Errorf("input %s is required", name)
			}
			v = in.Default
		}
		inputs[name] = v
	}
	for name := range with {
		if _, ok := a.Inputs[name]; !ok {
			return nil, fmt.Errorf("input %s is not an input of the action", name)
		}
	}
	work, err := os.MkdirTemp("", "actionrun-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	steps := map[string]map[string]string{}
	var addedPath []string
	for i, s := range a.Runs.Steps {
		if s.Shell != "bash" || s.Run == "" {
			return nil, fmt.Errorf("step %d (%s): only run steps with shell: bash are supported", i, s.ID)
		}
		script, err := eval(s.Run, inputs, steps)
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", s.ID, err)
		}
		file := filepath.Join(work, fmt.Sprintf("step%d.sh", i))
		output, ghPath := filepath.Join(work, fmt.Sprintf("output%d", i)), filepath.Join(work, fmt.Sprintf("path%d", i))
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			return nil, err
		}
		stepEnv := append([]string{}, env...)
		if len(addedPath) > 0 {
			stepEnv = append(stepEnv, "PATH="+strings.Join(addedPath, ":")+":"+lookup(env, "PATH"))
		}
		stepEnv = append(stepEnv, "GITHUB_ACTION_PATH="+a.Dir, "GITHUB_OUTPUT="+output, "GITHUB_PATH="+ghPath)
		for k, v := range s.Env {
			if v, err = eval(v, inputs, steps); err != nil {
				return nil, fmt.Errorf("step %s: env %s: %w", s.ID, k, err)
			}
			stepEnv = append(stepEnv, k+"="+v)
		}
		cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-eo", "pipefail", file)
		cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = stepEnv, log, log, work
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("step %s: %w", s.ID, err)
		}
		outs, err := readOutputs(output)
		if err != nil {
			return nil, fmt.Errorf("step %s: GITHUB_OUTPUT: %w", s.ID, err)
		}
		if s.ID != "" {
			steps[s.ID] = outs
		}
		if b, err := os.ReadFile(ghPath); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					addedPath = append([]string{l}, addedPath...)
				}
			}
		}
	}
	outputs := map[string]string{}
	for name, o := range a.Outputs {
		v, err := eval(o.Value, inputs, steps)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", name, err)
		}
		outputs[name] = v
	}
	return outputs, nil
}

// eval replaces every ${{ … }} of s.
func eval(s string, inputs map[string]string, steps map[string]map[string]string) (string, error) {
	var errs []string
	out := expr.ReplaceAllStringFunc(s, func(m string) string {
		e := expr.FindStringSubmatch(m)[1]
		for _, alt := range strings.Split(e, "||") {
			alt = strings.TrimSpace(alt)
			var v string
			switch parts := strings.Split(alt, "."); {
			case len(parts) == 2 && parts[0] == "inputs":
				v = inputs[parts[1]]
			case len(parts) == 4 && parts[0] == "steps" && parts[2] == "outputs":
				v = steps[parts[1]][parts[3]]
			default:
				errs = append(errs, "unsupported expression "+alt)
			}
			if v != "" {
				return v
			}
		}
		return ""
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// readOutputs parses a GITHUB_OUTPUT file: name=value lines and name<<DELIMITER blocks.
func readOutputs(path string) (map[string]string, error) {
	outs := map[string]string{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return outs, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, delim, ok := strings.Cut(line, "<<"); ok && !strings.Contains(name, "=") {
			var val []string
			closed := false
			for sc.Scan() {
				if sc.Text() == delim {
					closed = true
					break
				}
				val = append(val, sc.Text())
			}
			if !closed {
				return nil, fmt.Errorf("output %s: no closing %s", name, delim)
			}
			outs[name] = strings.Join(val, "\n")
			continue
		}
		if name, val, ok := strings.Cut(line, "="); ok {
			outs[name] = val
		} else if line != "" {
			return nil, fmt.Errorf("line %q is neither name=value nor name<<DELIMITER", line)
		}
	}
	return outs, sc.Err()
}

func lookup(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}
