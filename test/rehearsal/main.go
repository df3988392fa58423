package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// step is one line of the rehearsal: a Go function or a command.
type step struct {
	Name string
	// Run is the step as a Go function; Cmd a command run with R.Env() in the checkout (at the commit
	// of the clean copy; a `go test` there reuses the build cache, which a copy's new path would not).
	Run func(ctx context.Context, r *R) error
	Cmd []string
	// Needed steps run even when -run selects others: later steps read what they make.
	Needed bool
}

// R is what the steps share.
type R struct {
	Checkout string // the checkout the rehearsal was started from
	Root     string // the clean copy (clone step)
	Work     string // a scratch folder, removed at the end unless -keep
	Out      io.Writer
	Verbose  bool

	Dist    string // the release's goreleaser dist folder (release step)
	Version string // the release's version, without v
	// ReleaseURL is the release host's base in GitHub's layout, https://127.0.0.1:PORT/OWNER/REPO/releases
	// (serve-release step); CAFile the PEM of the CA its certificate is signed by.
	ReleaseURL, CAFile string
	// RunnerReleasesURL is the same host's actions/runner releases base, serving RunnerReleasesDir.
	RunnerReleasesURL, RunnerReleasesDir string

	cleanup []func()
}

// Env is the environment of the steps' commands: the process's, and the release host's CA for
// curl, git and Go clients (SSL_CERT_FILE), once there is one.
func (r *R) Env(extra ...string) []string {
	env := os.Environ()
	if r.CAFile != "" {
		env = append(env, "SSL_CERT_FILE="+r.CAFile, "CURL_CA_BUNDLE="+r.CAFile)
	}
	if r.ReleaseURL != "" {
		env = append(env, "RELEASE_URL="+r.ReleaseURL, "VERSION="+r.Version,
			"RUNNERPOOL_RUNNER_RELEASES_URL="+r.RunnerReleasesURL, "RUNNERPOOL_RUNNER_RELEASES_DIR="+r.RunnerReleasesDir)
	}
	return append(env, extra...)
}

// Defer runs f when the rehearsal ends.
func (r *R) Defer(f func()) { r.cleanup = append(r.cleanup, f) }

// run runs a command in dir with env, its output kept for the error (and shown with -v).
func (r *R) run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if r.Verbose {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, r.Out), io.MultiWriter(&out, r.Out)
	}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 4000 {
			tail = "…" + tail[len(tail)-4000:]
		}
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail)
	}
	return out.String(), nil
}

// bash runs a script with bash -euo pipefail in dir.
func (r *R) bash(ctx context.Context, dir string, env []string, script string) (string, error) {
	return r.run(ctx, dir, env, "bash", "-euo", "pipefail", "-c", script)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rehearse(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rehearsal:", err)
		os.Exit(1)
	}
}

func rehearse(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rehearsal", flag.ContinueOnError)
	runRE := fs.String("run", "", "run only the steps whose names match this regular expression (and the ones they need)")
	verbose := fs.Bool("v", false, "show the steps' output")
	keep := fs.Bool("keep", false, "keep the scratch folder")
	dist := fs.String("dist", "", "use this goreleaser dist folder (of a release step kept with -keep) instead of building the release")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sel, err := regexp.Compile(*runRE)
	if err != nil {
		return fmt.Errorf("-run: %w", err)
	}
	checkout, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(checkout, "test", "rehearsal")); err != nil {
		return errors.New("run it from the repository's root (make rehearsal)")
	}
	work, err := os.MkdirTemp("", "rehearsal-")
	if err != nil {
		return err
	}
	r := &R{Checkout: checkout, Work: work, Out: out, Verbose: *verbose, Dist: *dist}
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			r.cleanup[i]()
		}
		if *keep {
			fmt.Fprintf(out, "rehearsal: kept %s\n", work)
		} else {
			_ = os.RemoveAll(work)
		}
	}()
	start := time.Now()
	n := 0
	for _, s := range steps {
		if !s.Needed && !sel.MatchString(s.Name) {
			continue
		}
		t0 := time.Now()
		var err error
		if s.Run != nil {
			err = s.Run(ctx, r)
		} else {
			_, err = r.run(ctx, r.Checkout, r.Env(), s.Cmd[0], s.Cmd[1:]...)
		}
		if err != nil {
			fmt.Fprintf(out, "rehearsal: %s FAILED after %s\n", s.Name, time.Since(t0).Round(time.Second))
			return fmt.Errorf("step %s: %w", s.Name, err)
		}
		n++
		fmt.Fprintf(out, "rehearsal: %s ok (%s)\n", s.Name, time.Since(t0).Round(100*time.Millisecond))
	}
	fmt.Fprintf(out, "rehearsal: ok steps=%d (%s)\n", n, time.Since(start).Round(time.Second))
	return nil
}

// cloneStep makes the clean copy: a clone of the checkout's HEAD (what is committed; a change not
// committed is not rehearsed), whose origin is the project's GitHub repository as goreleaser reads it.
func cloneStep(ctx context.Context, r *R) error {
	r.Root = filepath.Join(r.Work, "clone")
	if _, err := r.run(ctx, r.Work, r.Env(), "git", "clone", "--quiet", "--no-hardlinks", r.Checkout, r.Root); err != nil {
		return err
	}
	if out, _ := r.run(ctx, r.Checkout, r.Env(), "git", "status", "--porcelain", "--untracked-files=no"); strings.TrimSpace(out) != "" {
		fmt.Fprintln(r.Out, "rehearsal: note: the checkout has changes not committed; the rehearsal runs HEAD")
	}
	_, err := r.run(ctx, r.Root, r.Env(), "git", "remote", "set-url", "origin", "https://github.com/"+owner+"/"+repo+".git")
	return err
}

// The project's GitHub repository, whose release layout the release host serves.
const (
	owner = "runnerpool"
	repo  = "terraform-provider-runnerpool"
)
