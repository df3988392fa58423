package actionrun

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v4"
)

// WorkflowInputs reads a workflow file and returns the with: of its steps that use one of the
// repository's actions (uses: OWNER/REPO/examples/github-actions/NAME@REF), by action NAME.
func WorkflowInputs(path string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses string
				With map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	with := map[string]map[string]string{}
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			const dir = "/examples/github-actions/"
			if i := strings.Index(s.Uses, dir); i >= 0 {
				name, _, _ := strings.Cut(s.Uses[i+len(dir):], "@")
				if s.With == nil {
					s.With = map[string]string{}
				}
				with[name] = s.With
			}
		}
	}
	return with, nil
}
