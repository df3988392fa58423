// Table tests of the plan-time validators and of how schedule problems map to attributes.
package provider

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

// errorsAt lists "path: summary: detail" for every error diagnostic.
func errorsAt(diags diag.Diagnostics) []string {
	var out []string
	for _, d := range diags.Errors() {
		p := ""
		if wp, ok := d.(diag.DiagnosticWithPath); ok {
			p = wp.Path().String()
		}
		out = append(out, p+": "+d.Summary()+": "+d.Detail())
	}
	return out
}

func expectDiags(t *testing.T, diags diag.Diagnostics, want []string) {
	t.Helper()
	got := errorsAt(diags)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func strList(vals ...string) types.List {
	elems := make([]attr.Value, len(vals))
	for i, v := range vals {
		elems[i] = types.StringValue(v)
	}
	return types.ListValueMust(types.StringType, elems)
}

func TestStringValidators(t *testing.T) {
	t.Parallel()
	at := path.Root("schedule").AtListIndex(1).AtName("time_range").AtListIndex(0).AtName("end")
	cases := []struct {
		name string
		v    validator.String
		val  types.String
		want []string
	}{
		{"null is left to Required", endValidator, types.StringNull(), nil},
		{"unknown is checked at apply", endValidator, types.StringUnknown(), nil},
		{"24:00 ends a range", endValidator, types.StringValue("24:00"), nil},
		{"24:00 cannot start one", startValidator, types.StringValue("24:00"),
			[]string{at.String() + `: Invalid schedule time: time "24:00": 24:00 is allowed only as the end`}},
		{"bad time", endValidator, types.StringValue("7pm"), []string{at.String() + `: Invalid schedule time: time "7pm": use 24-hour HH:MM`}},
		{"unknown timezone", timezoneValidator, types.StringValue("Mars/Olympus_Mons"),
			[]string{at.String() + `: Invalid timezone: timezone "Mars/Olympus_Mons" is not a known IANA zone`}},
		{"timezone", timezoneValidator, types.StringValue("America/New_York"), nil},
		{"one of", oneOf("billing mode", "A", "B"), types.StringValue("C"), []string{at.String() + `: Invalid billing mode: "C" is not one of "A", "B"`}},
		{"duration", durationBetween("max runtime", time.Minute, time.Hour), types.StringValue("2h"),
			[]string{at.String() + ": Invalid max runtime: max runtime 2h0m0s: must be between 1m0s and 1h0m0s"}},
		{"not a duration", durationBetween("idle time", time.Minute, time.Hour), types.StringValue("ten minutes"),
			[]string{at.String() + `: Invalid idle time: "ten minutes" is not a duration`}},
		{"name", nameValidator("pool name"), types.StringValue("Big Pool"), []string{at.String() + `: Invalid pool name: name "Big Pool"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var resp validator.StringResponse
			tc.v.ValidateString(t.Context(), validator.StringRequest{Path: at, ConfigValue: tc.val}, &resp)
			expectDiags(t, resp.Diagnostics, tc.want)
		})
	}
}

func TestListValidators(t *testing.T) {
	t.Parallel()
	at := path.Root("schedule").AtListIndex(0).AtName("days")
	patterns := listEach{check: check("instance type pattern", "a pattern", func(s string) error {
		if s == "" {
			return errString("instance type pattern is empty")
		}
		return nil
	}), unique: true}
	cases := []struct {
		name string
		v    validator.List
		val  types.List
		want []string
	}{
		{"days", listEach{check: dayValidator, unique: true}, strList("monday", "Funday", "monday"), []string{
			`schedule[0].days[1]: Invalid day: day "Funday" is not a day name: use monday`,
			`schedule[0].days[2]: Duplicate day: "monday" is listed twice`,
		}},
		{"empty pattern", patterns, strList("c7i.*", ""), []string{"schedule[0].days[1]: Invalid instance type pattern: instance type pattern is empty"}},
		{"unknown element skipped", listEach{check: dayValidator}, types.ListValueMust(types.StringType, []attr.Value{types.StringUnknown()}), nil},
		{"too many", listSize{what: "days", min: 1, max: 2}, strList("monday", "tuesday", "friday"), []string{"schedule[0].days: Invalid number of days: 3 days"}},
		{"empty", listSize{what: "days", min: 1, max: 2}, strList(), []string{"schedule[0].days: Invalid number of days: 0 days"}},
		{"null list is unset", listSize{what: "days", min: 1, max: 2}, types.ListNull(types.StringType), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var resp validator.ListResponse
			tc.v.ValidateList(t.Context(), validator.ListRequest{Path: at, ConfigValue: tc.val}, &resp)
			expectDiags(t, resp.Diagnostics, tc.want)
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestInt64AndTagValidators(t *testing.T) {
	t.Parallel()
	at := path.Root("schedule").AtListIndex(2).AtName("hot")
	var resp validator.Int64Response
	countValidator("hot count").ValidateInt64(t.Context(), validator.Int64Request{Path: at, ConfigValue: types.Int64Value(-1)}, &resp)
	expectDiags(t, resp.Diagnostics, []string{"schedule[2].hot: Invalid hot count: hot count -1: must be between 0 and 1000"})

	var mresp validator.MapResponse
	tags := types.MapValueMust(types.StringType, map[string]attr.Value{
		"runnerpool:deployment": types.StringValue("x"), "team": types.StringValue(strings.Repeat("v", 257)),
	})
	tagsCheck{}.ValidateMap(t.Context(), validator.MapRequest{Path: path.Root("tags"), ConfigValue: tags}, &mresp)
	got := errorsAt(mresp.Diagnostics)
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), `tags["runnerpool:deployment"]: Reserved tag key`) ||
		!strings.Contains(strings.Join(got, "\n"), `tags["team"]: Invalid tag value`) {
		t.Errorf("tag errors = %q", got)
	}
}

// TestInstanceTagsCheck: runner class tags are instance tags with instance metadata tags on, so EC2's
// stricter key rules apply at plan time.
func TestInstanceTagsCheck(t *testing.T) {
	t.Parallel()
	many := map[string]attr.Value{}
	for i := range 41 {
		many[fmt.Sprintf("k%d", i)] = types.StringValue("v")
	}
	cases := []struct {
		name string
		tags map[string]attr.Value
		want []string
	}{
		{"allowed", map[string]attr.Value{"team": types.StringValue("ci"), "cost-center:id=1,a.b@c+d_e": types.StringValue("x y/z")}, nil},
		{"space", map[string]attr.Value{"cost center": types.StringValue("1")}, []string{`tags["cost center"]: Invalid tag key: tag key "cost center": with instance metadata tags on`}},
		{"slash", map[string]attr.Value{"kubernetes.io/cluster": types.StringValue("1")}, []string{`tags["kubernetes.io/cluster"]: Invalid tag key`}},
		{"dots", map[string]attr.Value{"..": types.StringValue("1")}, []string{`tags[".."]: Invalid tag key`}},
		{"_info", map[string]attr.Value{"_info": types.StringValue("1")}, []string{`tags["_info"]: Invalid tag key`}},
		{"reserved", map[string]attr.Value{"runnerpool:wake": types.StringValue("1")}, []string{`tags["runnerpool:wake"]: Invalid tag key: tag key "runnerpool:wake": keys starting with "runnerpool:" are reserved`}},
		{"aws", map[string]attr.Value{"AWS:x": types.StringValue("1")}, []string{`tags["AWS:x"]: Invalid tag key`}},
		{"long value", map[string]attr.Value{"team": types.StringValue(strings.Repeat("v", 257))}, []string{`tags["team"]: Invalid tag value`}},
		{"too many", many, []string{"tags: Too many tags: 41 tags: at most 40"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var resp validator.MapResponse
			instanceTagsCheck{}.ValidateMap(t.Context(), validator.MapRequest{Path: path.Root("tags"), ConfigValue: types.MapValueMust(types.StringType, tc.tags)}, &resp)
			got := errorsAt(resp.Diagnostics)
			if len(got) != len(tc.want) {
				t.Fatalf("errors = %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %q, want it to start with %q", got[i], w)
				}
			}
		})
	}
}

func TestReportScheduleErrors(t *testing.T) {
	t.Parallel()
	rng := func(s, e string) schedule.TimeRange { return schedule.TimeRange{Start: s, End: e} }
	spec := schedule.Spec{Timezone: "Mars/Base", Schedules: []schedule.Schedule{
		{Name: "default", Hot: 1},
		{Name: "nights", Match: &schedule.Match{Times: []schedule.TimeRange{rng("22:00", "22:00"), rng("25:00", "06:00")}}},
		{Name: "nights", Match: &schedule.Match{Days: []string{"friday", "friday"}}, Hot: -1},
		{Name: "other"},
		{Name: "bad name!", Match: &schedule.Match{Days: []string{"monday"}}},
	}}
	var diags diag.Diagnostics
	reportScheduleErrors(&diags, spec, path.Root("schedule"))
	// Single values (timezone, the 25:00 start, the duplicate day, the negative count, the bad name)
	// are the attribute validators' to report; only the relations between values are left here.
	expectDiags(t, diags, []string{
		"schedule[1].time_range[0].end: Invalid time range: time range 22:00-22:00 is empty",
		`schedule[2].name: Invalid schedule: schedule name "nights" is used by schedules 1 and 2`,
		`schedule[3]: Conflicting default schedules: schedules "default" and "other" both have neither days nor time ranges`,
	})
}

// TestReportScheduleErrorsCountsOnce: too many time ranges or schedules are the block validators'
// to report (listSize); the relations check adds nothing, so one problem gives one error.
func TestReportScheduleErrorsCountsOnce(t *testing.T) {
	t.Parallel()
	var ranges []schedule.TimeRange
	for i := range schedule.MaxRanges + 1 {
		ranges = append(ranges, schedule.TimeRange{Start: fmt.Sprintf("%02d:00", i), End: fmt.Sprintf("%02d:30", i)})
	}
	spec := schedule.Spec{Timezone: "UTC", Schedules: []schedule.Schedule{{Name: "many", Match: &schedule.Match{Times: ranges}, Hot: 1}}}
	for range schedule.MaxSchedules {
		spec.Schedules = append(spec.Schedules, schedule.Schedule{Name: fmt.Sprintf("s%d", len(spec.Schedules)), Match: &schedule.Match{Days: []string{"monday"}}})
	}
	var diags diag.Diagnostics
	reportScheduleErrors(&diags, spec, path.Root("schedule"))
	expectDiags(t, diags, nil)
}
