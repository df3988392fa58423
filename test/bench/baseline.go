// The report's "before and after": figures of an earlier commit measured on the same machine, kept
// beside the report (bench/baseline.tsv) and set beside this run's in every report written there.
package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// BaselineFile is read from Options.ReportDir when a report is written there.
const BaselineFile = "baseline.tsv"

// Baseline is an earlier measurement: what was measured and how ("#" lines), and its figures.
type Baseline struct {
	About   []string
	Figures map[string]float64
	Order   []string
}

// ParseBaseline reads a baseline: "# ..." lines say what it is (commit, machine, command, load),
// every other non-empty line is "NAME<TAB>VALUE", as `bench: NAME=VALUE` lines give them.
func ParseBaseline(data []byte) (*Baseline, error) {
	b := &Baseline{Figures: map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#"):
			b.About = append(b.About, strings.TrimSpace(strings.TrimPrefix(line, "#")))
			continue
		}
		name, value, ok := strings.Cut(line, "\t")
		if !ok {
			return nil, fmt.Errorf("baseline line %d: want NAME<TAB>VALUE, got %q", n, line)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("baseline line %d: %s: %w", n, name, err)
		}
		if _, dup := b.Figures[name]; dup {
			return nil, fmt.Errorf("baseline line %d: %s given twice", n, name)
		}
		b.Figures[name] = v
		b.Order = append(b.Order, name)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if len(b.Figures) == 0 {
		return nil, errors.New("baseline: no figures")
	}
	return b, nil
}

// readBaseline reads dir's baseline, if there is one.
func readBaseline(dir string) (*Baseline, error) {
	data, err := os.ReadFile(filepath.Join(dir, BaselineFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	b, err := ParseBaseline(data)
	if err != nil {
		return nil, fmt.Errorf("report: %s: %w", BaselineFile, err)
	}
	return b, nil
}

// beforeAfter renders the baseline's figures beside this run's, in the baseline's order.
func (r *Result) beforeAfter(p func(format string, args ...any)) {
	b := r.Baseline
	if b == nil {
		return
	}
	p("## Before and after")
	p("")
	for _, a := range b.About {
		p("%s", a)
	}
	p("")
	p("| figure | before | this run | change |")
	p("|---|---:|---:|---:|")
	now := map[string]Figure{}
	for _, f := range r.Figures {
		now[f.Name] = f
	}
	for _, name := range b.Order {
		before := b.Figures[name]
		f, ok := now[name]
		switch {
		case !ok:
			p("| `%s` | %s | not in this run | |", name, formatValue(before))
		case f.Missing != "":
			p("| `%s` | %s | n/a | |", name, formatValue(before))
		case before == 0:
			p("| `%s` | %s | %s | |", name, formatValue(before), formatValue(f.Value))
		default:
			p("| `%s` | %s | %s | %+.0f %% |", name, formatValue(before), formatValue(f.Value), 100*(f.Value-before)/before)
		}
	}
	p("")
}
