// Errors of fleet creation: what EC2 said per capacity pool, and the typed error of a fleet that
// could not be filled.
package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/smithy-go"
)

// RefusedAttribute names the runner class attribute an EC2 launch error is about ("" when none):
// "image" (InvalidAMIID.*), "security_groups" (InvalidGroup.*), "instance_profile" or "volume".
func RefusedAttribute(err error) string {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return ""
	}
	code, msg := ae.ErrorCode(), strings.ToLower(ae.ErrorMessage())
	switch {
	case strings.HasPrefix(code, "InvalidAMIID"):
		return "image"
	case strings.HasPrefix(code, "InvalidGroup"):
		return "security_groups"
	case strings.Contains(msg, "iaminstanceprofile"):
		return "instance_profile"
	case strings.Contains(msg, "volume") || strings.Contains(msg, "iops") || strings.Contains(msg, "throughput"):
		return "volume"
	}
	return ""
}

// LaunchError is one entry of a CreateFleet errorSet: a capacity pool EC2 could not launch from.
type LaunchError struct {
	Code, Message string
	UsageClass    string
	InstanceType  string // empty when EC2 did not say
	Zone          string
	SubnetID      string
}

// offeringCodes are the errorSet codes that say one offering (instance type in a zone, as spot or
// on-demand) is out of capacity right now. They feed the unavailable-offerings cache.
var offeringCodes = []string{
	"InsufficientInstanceCapacity",
	"InsufficientCapacity",
	"UnfulfillableCapacity",
	"InsufficientHostCapacity",
}

// capacityCodes are the codes of a capacity shortage of any kind: per offering, or of the account
// (vCPU, instance or spot limits) or the subnet (free addresses). A shortage is "unsuccessful
// provisioning", never a bug; only a shortage of spot capacity is worth the on-demand fallback.
var capacityCodes = append(slices.Clone(offeringCodes),
	"MaxSpotInstanceCountExceeded",
	"VcpuLimitExceeded",
	"InstanceLimitExceeded",
	"InsufficientFreeAddressesInSubnet",
	"SpotMaxPriceTooLow",
)

func isOfferingCode(code string) bool { return slices.Contains(offeringCodes, code) }
func isCapacityCode(code string) bool { return slices.Contains(capacityCodes, code) }

// InsufficientCapacityError says an instant fleet launched fewer instances than asked. Every
// instance it did launch has been terminated (Terminated), except those listed in Unterminated,
// whose TerminateInstances failed: the caller must record them (so refresh retries the
// termination) and never forget them.
type InsufficientCapacityError struct {
	UsageClass string
	Requested  int
	Launched   int // instances EC2 launched before giving up
	Errors     []LaunchError
	// Skipped is set when no CreateFleet was sent: every offering the request allows is cached as
	// unavailable.
	Skipped      bool
	Terminated   []string
	Unterminated []Launched
	TerminateErr error
	// Fallback is the error of the first (spot) attempt when the on-demand fallback failed too.
	Fallback *InsufficientCapacityError
}

func (e *InsufficientCapacityError) Error() string {
	var b strings.Builder
	switch {
	case e.Skipped:
		fmt.Fprintf(&b, "insufficient %s capacity for %d instances: every allowed offering is cached as unavailable", e.UsageClass, e.Requested)
	default:
		fmt.Fprintf(&b, "insufficient %s capacity: fleet launched %d of %d instances", e.UsageClass, e.Launched, e.Requested)
	}
	if len(e.Errors) > 0 {
		seen := map[string]bool{}
		var parts []string
		for _, le := range e.Errors {
			p := le.Code
			if le.InstanceType != "" || le.Zone != "" {
				p += " (" + strings.Trim(le.InstanceType+" in "+le.Zone, " in") + ")"
			}
			if !seen[p] {
				seen[p] = true
				parts = append(parts, p)
			}
		}
		fmt.Fprintf(&b, ": %s", strings.Join(parts, ", "))
	}
	if len(e.Terminated) > 0 {
		fmt.Fprintf(&b, "; terminated %d launched instances", len(e.Terminated))
	}
	if len(e.Unterminated) > 0 {
		fmt.Fprintf(&b, "; %d could not be terminated: %v", len(e.Unterminated), e.TerminateErr)
	}
	if e.Fallback != nil {
		fmt.Fprintf(&b, " (after spot: %s)", e.Fallback.Error())
	}
	return b.String()
}

// Unwrap exposes the termination failure, if any.
func (e *InsufficientCapacityError) Unwrap() error { return e.TerminateErr }

// capacityShortage reports whether any launch error is a capacity error (as opposed to, say, an
// invalid launch template), or there were none at all (EC2 just did not fill the fleet).
func (e *InsufficientCapacityError) capacityShortage() bool {
	if len(e.Errors) == 0 {
		return true
	}
	return slices.ContainsFunc(e.Errors, func(le LaunchError) bool { return isCapacityCode(le.Code) })
}

// IsInsufficientCapacity reports whether err is (or wraps) an *InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var ice *InsufficientCapacityError
	return errors.As(err, &ice)
}
