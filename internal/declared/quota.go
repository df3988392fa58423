// Instance caps against warm-pool targets: a cap below what the warm pools keep would leave a pool
// that can never converge and a deployment whose provisions are all refused. The reconciler checks
// it at start-up, the Terraform provider at plan.
package declared

import (
	"fmt"
	"maps"
	"slices"
)

// PeakTarget is the most instances a pool's schedules ever ask for (hot plus stopped).
func (p WarmPool) PeakTarget() int {
	peak := 0
	for _, s := range p.Schedules {
		peak = max(peak, s.Hot+s.Stopped)
	}
	return peak
}

// CheckCaps lists the caps the warm pools' peak targets pass: the deployment's (maxInstances; 0 is
// none), over every pool, and each runner class's max_instances, over its pools. A pool whose runner
// class is not in classes counts only towards the deployment's cap.
func CheckCaps(maxInstances int, classes map[string]RunnerClass, pools []WarmPool) []error {
	total := 0
	byClass := map[string]int{}
	for _, p := range pools {
		total += p.PeakTarget()
		byClass[p.RunnerClass] += p.PeakTarget()
	}
	var errs []error
	if maxInstances > 0 && total > maxInstances {
		errs = append(errs, fmt.Errorf("the warm pools keep up to %d instances, more than the deployment's cap of %d (max-instances)", total, maxInstances))
	}
	for _, name := range slices.Sorted(maps.Keys(byClass)) {
		rc, ok := classes[name]
		if ok && rc.MaxInstances > 0 && byClass[name] > rc.MaxInstances {
			errs = append(errs, fmt.Errorf("the warm pools of runner class %s keep up to %d instances, more than its max_instances %d", name, byClass[name], rc.MaxInstances))
		}
	}
	return errs
}
