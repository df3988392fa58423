package schedule

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

const guidePath = "../../docs/guides/schedules.md"

// guidePool is the warm pool the schedules guide writes, decoded from its own terraform block.
type guidePool struct {
	Timezone  string `hcl:"timezone"`
	Schedules []struct {
		Name      string   `hcl:"name"`
		Hot       int      `hcl:"hot"`
		Stopped   int      `hcl:"stopped"`
		Days      []string `hcl:"days,optional"`
		TimeRange []struct {
			Start string `hcl:"start"`
			End   string `hcl:"end"`
		} `hcl:"time_range,block"`
	} `hcl:"schedule,block"`
	Rest hcl.Body `hcl:",remain"`
}

// TestGuideTable: the schedules guide's example pool, read from the guide's terraform block and
// evaluated as the reconciler evaluates it, gives every row of the guide's table (local time,
// schedule, hot, stopped). The rows' weekdays are taken in the week of Monday 2025-03-24.
func TestGuideTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```terraform\n(.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatalf("%s has no terraform block", guidePath)
	}
	file, diags := hclsyntax.ParseConfig(block[1], "schedules.md", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var top struct {
		Resources []struct {
			Type string   `hcl:"type,label"`
			Name string   `hcl:"name,label"`
			Body hcl.Body `hcl:",remain"`
		} `hcl:"resource,block"`
	}
	if diags := gohcl.DecodeBody(file.Body, nil, &top); diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(top.Resources) != 1 || top.Resources[0].Type != "runnerpool_warm_pool" {
		t.Fatalf("the guide's block declares %+v, want one runnerpool_warm_pool", top.Resources)
	}
	var pool guidePool
	if diags := gohcl.DecodeBody(top.Resources[0].Body, nil, &pool); diags.HasErrors() {
		t.Fatal(diags)
	}
	spec := Spec{Timezone: pool.Timezone}
	for _, s := range pool.Schedules {
		sc := Schedule{Name: s.Name, Hot: s.Hot, Stopped: s.Stopped}
		if len(s.Days) > 0 || len(s.TimeRange) > 0 {
			sc.Match = &Match{Days: s.Days}
			for _, r := range s.TimeRange {
				sc.Match.Times = append(sc.Match.Times, TimeRange{Start: r.Start, End: r.End})
			}
		}
		spec.Schedules = append(spec.Schedules, sc)
	}
	cal, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}

	week := map[string]int{"Monday": 24, "Tuesday": 25, "Wednesday": 26, "Thursday": 27, "Friday": 28, "Saturday": 29, "Sunday": 30}
	row := regexp.MustCompile("(?m)^\\| (Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday) (\\d\\d):(\\d\\d) +\\| `([a-z]+)` +\\| (\\d+) +\\| (\\d+) +\\|$")
	rows := row.FindAllStringSubmatch(string(b), -1)
	if len(rows) < 6 {
		t.Fatalf("%s: %d rows in the table, want the 6 it shows", guidePath, len(rows))
	}
	for _, r := range rows {
		h, _ := strconv.Atoi(r[2])
		m, _ := strconv.Atoi(r[3])
		hot, _ := strconv.Atoi(r[5])
		stopped, _ := strconv.Atoi(r[6])
		at := time.Date(2025, time.March, week[r[1]], h, m, 0, 0, cal.Location())
		got := cal.At(at)
		if got.Schedule != r[4] || got.Hot != hot || got.Stopped != stopped {
			t.Errorf("%s: %q: At gives %s hot=%d stopped=%d", guidePath, strings.TrimSpace(r[0]), got.Schedule, got.Hot, got.Stopped)
		}
	}
}

// TestGuideValidation: each value the schedules guide's "Validation" section names as refused is
// refused, with the attribute at fault (the provider runs this validation at plan time:
// resource_warm_pool.go's ValidateConfig, TestAccWarmPoolPlanValidation).
func TestGuideValidation(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "## Validation\n")
	section = strings.Join(strings.Fields(section), " ")
	at := func(days []string, start, end string) []Schedule {
		return []Schedule{{Name: "s", Match: &Match{Days: days, Times: []TimeRange{{Start: start, End: end}}}}}
	}
	tests := []struct {
		says      string // what the guide quotes
		spec      Spec
		field     string
		part      string
		wantError string
	}{
		{"an unknown timezone (`Europe/Pariss`)", Spec{Timezone: "Europe/Pariss"}, "timezone", "", "Europe/Pariss"},
		{"a day name (`Funday`)", Spec{Schedules: []Schedule{{Name: "s", Match: &Match{Days: []string{"Funday"}}}}}, "days", "", "Funday"},
		{"a time (`25:00`,", Spec{Schedules: at(nil, "22:00", "25:00")}, "times", "end", "25:00"},
		{"`7pm`,", Spec{Schedules: at(nil, "7pm", "23:00")}, "times", "start", "7pm"},
		{"`24:00` as a start)", Spec{Schedules: at(nil, "24:00", "06:00")}, "times", "start", "24:00"},
		{"an empty range (`06:00`-`06:00`)", Spec{Schedules: at(nil, "06:00", "06:00")}, "times", "", "06:00-06:00"},
		{"a negative or too large count (0 to 1000)", Spec{Schedules: []Schedule{{Name: "s", Hot: -1}}}, "hot", "", "-1"},
		{"a negative or too large count (0 to 1000)", Spec{Schedules: []Schedule{{Name: "s", Stopped: MaxCount + 1}}}, "stopped", "", "1001"},
		{"duplicate schedule names", Spec{Schedules: append(at(nil, "08:00", "09:00"), at([]string{"monday"}, "10:00", "11:00")...)}, "name", "", "names must be unique"},
		{"a second default schedule", Spec{Schedules: []Schedule{{Name: "a"}, {Name: "b"}}}, "", "", "only one default schedule"},
	}
	for _, tc := range tests {
		if !strings.Contains(section, tc.says) {
			t.Errorf("%s's Validation section does not say %q", guidePath, tc.says)
		}
		var errs Errors
		if err := tc.spec.Validate(); !errors.As(err, &errs) || len(errs) == 0 {
			t.Errorf("%s: Validate = %v, want field errors", tc.says, err)
			continue
		}
		fe := errs[0]
		if fe.Field != tc.field || (tc.part != "" && fe.Part != tc.part) || !strings.Contains(fe.Error(), tc.wantError) {
			t.Errorf("%s: %s (field %q part %q), want field %q part %q naming %q", tc.says, fe, fe.Field, fe.Part, tc.field, tc.part, tc.wantError)
		}
	}
}
