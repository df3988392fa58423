// Validation errors of a schedule spec, each with the path of the value at fault so the Terraform
// provider can report it on the attribute and a stored spec's error names the field.
package schedule

import (
	"fmt"
	"strings"
)

// FieldError is one problem of a Spec.
type FieldError struct {
	// Schedule is the index in Spec.Schedules, or -1 for a spec-level field (timezone, schedules).
	Schedule int
	// Field is "timezone", "schedules", "name", "days", "times", "hot" or "stopped"; "" means the
	// whole schedule.
	Field string
	// Item is the index in days or times, or -1 for the whole field.
	Item int
	// Part is "start" or "end" for a time range, else "".
	Part string
	Err  error
}

// Path is the JSON path of the value at fault, e.g. "schedules[1].match.times[0].end".
func (e *FieldError) Path() string {
	if e.Schedule < 0 {
		return e.Field
	}
	var b strings.Builder
	fmt.Fprintf(&b, "schedules[%d]", e.Schedule)
	switch e.Field {
	case "":
	case "days", "times":
		b.WriteString(".match." + e.Field)
	default:
		b.WriteString("." + e.Field)
	}
	if e.Item >= 0 {
		fmt.Fprintf(&b, "[%d]", e.Item)
	}
	if e.Part != "" {
		b.WriteString("." + e.Part)
	}
	return b.String()
}

func (e *FieldError) Error() string { return e.Path() + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found in a Spec, in the order of the spec.
type Errors []*FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
