// Package iamsim asks an IAM policy simulator we did not write (the npm package
// @cloud-copilot/iam-simulate, which follows AWS's documented evaluation rules) whether policies allow
// requests. Our own evaluators are written from the same reading of the docs as the policies they
// check; this one is not. Test code only: the package is AGPL-licensed and never ships.
//
// The npm package is installed in this folder from the committed lock file by
// test/stack/install-deps.sh --test (make test-deps).
package iamsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Decisions of the simulator, AWS's names for them.
const (
	Allowed          = "Allowed"
	ImplicitlyDenied = "ImplicitlyDenied"
	ExplicitlyDenied = "ExplicitlyDenied"
)

// Policy is one identity policy of the principal: a name and the JSON policy document.
type Policy struct {
	Name   string          `json:"name"`
	Policy json.RawMessage `json:"policy"`
}

// Request is one request as IAM evaluates it: the action, the resource's ARN, the principal (the
// role session's ARN), the resource's account and the request's condition keys (a string or a list
// of strings each; a key absent from the map is absent from the request).
type Request struct {
	Action    string         `json:"action"`
	Resource  string         `json:"resource"`
	Principal string         `json:"principal"`
	Account   string         `json:"account"`
	Context   map[string]any `json:"context,omitempty"`
	// ResourcePolicy is the resource's own policy where the service has one (a KMS key policy:
	// KMS allows nothing its key policy does not allow or delegate to IAM); nil: none.
	ResourcePolicy json.RawMessage `json:"resourcePolicy,omitempty"`
}

// Dir is the folder of the simulator's package.json and script.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

type answer struct {
	Decision string          `json:"decision"`
	Errors   json.RawMessage `json:"errors,omitempty"`
}

// Simulate returns the simulator's decision for each request under the policies, in order. A request
// the simulator refuses to evaluate (an unknown action, a resource of the wrong type for it, a
// condition key or operator it does not know) is an error: a policy must not rely on what an
// independent reading of AWS's documentation cannot confirm.
func Simulate(ctx context.Context, policies []Policy, reqs []Request) ([]string, error) {
	dir := Dir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@cloud-copilot", "iam-simulate")); err != nil {
		return nil, fmt.Errorf("the IAM simulator is not installed in %s: run test/stack/install-deps.sh --test (make test-deps): %w", dir, err)
	}
	in, err := json.Marshal(map[string]any{"policies": policies, "requests": reqs})
	if err != nil {
		return nil, fmt.Errorf("encoding simulation: %w", err)
	}
	cmd := exec.CommandContext(ctx, "node", "simulate.mjs")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("running the IAM simulator: %w: %s", err, stderr.String())
	}
	var answers []answer
	if err := json.Unmarshal(out, &answers); err != nil {
		return nil, fmt.Errorf("decoding the IAM simulator's answer %q: %w", out, err)
	}
	if len(answers) != len(reqs) {
		return nil, fmt.Errorf("the IAM simulator answered %d of %d requests", len(answers), len(reqs))
	}
	decisions := make([]string, len(answers))
	var errs []error
	for i, a := range answers {
		if a.Errors != nil || a.Decision == "Error" {
			errs = append(errs, fmt.Errorf("request %d (%s on %s): the simulator refused it: %s", i, reqs[i].Action, reqs[i].Resource, a.Errors))
		}
		decisions[i] = a.Decision
	}
	return decisions, errors.Join(errs...)
}
