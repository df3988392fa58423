// Command tracegen writes the generated week of jobs (jobtrace.DefaultParams) as gzipped CSV:
//
//	go run ./internal/jobtrace/cmd/tracegen -seed 1 -o internal/jobtrace/testdata/week.csv.gz
//	go run ./internal/jobtrace/cmd/tracegen -seed 2 -weeks-before 1 -o internal/jobtrace/testdata/week-before.csv.gz
//
// and, with -runs, the week whose jobs carry their runs (jobtrace.RunsParams):
//
//	go run ./internal/jobtrace/cmd/tracegen -runs -seed 1 -o internal/jobtrace/testdata/week-runs.csv.gz
//	go run ./internal/jobtrace/cmd/tracegen -runs -seed 2 -weeks-before 1 -o internal/jobtrace/testdata/week-runs-before.csv.gz
//
// and, with -heldout NAME, a held-out week of jobtrace.HeldOut (asia, americas), its classes merged:
//
//	go run ./internal/jobtrace/cmd/tracegen -heldout asia -seed 1 -o internal/jobtrace/testdata/week-asia.csv.gz
//	go run ./internal/jobtrace/cmd/tracegen -heldout asia -seed 2 -weeks-before 1 -o internal/jobtrace/testdata/week-asia-before.csv.gz
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

func main() {
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "week.csv.gz", "output file (gzipped CSV)")
	before := flag.Int("weeks-before", 0, "start this many weeks before the default week")
	runs := flag.Bool("runs", false, "jobs carry run ids and workflow names; matrix workflows may run a setup job first (jobtrace.RunsParams)")
	setup := flag.Float64("setup-share", -1, "with -runs: the chance a matrix workflow runs a setup job first (default: RunsParams')")
	heldout := flag.String("heldout", "", "a held-out week of jobtrace.HeldOut (asia, americas)")
	flag.Parse()
	if *heldout != "" {
		classes, ok := jobtrace.HeldOut()[*heldout]
		if !ok {
			fmt.Fprintf(os.Stderr, "tracegen: no held-out week %q\n", *heldout)
			os.Exit(2)
		}
		for i := range classes {
			classes[i].Start = classes[i].Start.AddDate(0, 0, -7**before)
		}
		if err := write(*out, jobtrace.GenerateClasses(classes, *seed)); err != nil {
			fmt.Fprintln(os.Stderr, "tracegen:", err)
			os.Exit(1)
		}
		return
	}
	p := jobtrace.DefaultParams()
	if *runs {
		p = jobtrace.RunsParams()
		if *setup >= 0 {
			p.Runs.SetupShare = *setup
		}
	}
	p.Start = p.Start.AddDate(0, 0, -7**before)
	if err := write(*out, jobtrace.Generate(p, *seed)); err != nil {
		fmt.Fprintln(os.Stderr, "tracegen:", err)
		os.Exit(1)
	}
}

func write(path string, jobs []jobtrace.Job) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := jobtrace.WriteCSV(zw, jobs); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
