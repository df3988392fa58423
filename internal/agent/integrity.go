// integrity.go: the runner's installation between workflows. A job runs as the runner user and may try
// to change what the next workflow on this instance runs (config.sh, run.sh, bin/Runner.Listener, the
// externals). The user data therefore installs the runner root-owned (its top directory root-owned,
// group-writable for the runner user and sticky, so config.sh can add .runner, .credentials, .env, .path
// and _diag but cannot replace or remove a file of the installation) and writes a sha256 manifest of
// every file to the agent's root-only state directory. Before every registration and before every
// release the agent stops whatever the runner user left running, removes the runner user's files from
// the top directory (the next config.sh writes them again) and checks each file of the manifest: its
// content, its owner (root) and that neither it nor a directory above it is writable by anyone else. A
// mismatch is never repaired: the agent reports the registration or the release as failed, and the
// control plane discards the instance instead of handing it to another workflow.
package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
)

// ErrInstallationModified marks a runner installation that does not match its manifest.
var ErrInstallationModified = errors.New("runner installation modified")

// manifestEntry is one line of a sha256sum-format manifest.
type manifestEntry struct {
	path string // relative to the installation, cleaned, never leaving it
	sum  string // lower-case hex
}

// maxManifestProblems bounds how many problems a failed verification names.
const maxManifestProblems = 5

// checkRunner prepares the runner's installation for a registration or a release and verifies it: the
// runner user's processes are killed (none may change a file after it was checked), with prune the
// runner user's entries in the installation's top directory are removed, and the installation is
// checked against its manifest. Each step runs only when configured (RunnerUser, RunnerManifest).
func (a *agent) checkRunner(ctx context.Context, prune bool) error {
	if uid, ok, err := a.runnerUID(); err != nil {
		return err
	} else if ok {
		if err := killUserProcesses(ctx, uid); err != nil {
			return err
		}
	}
	if a.cfg.RunnerManifest == "" {
		return nil
	}
	if prune {
		if err := pruneInstallation(a.cfg.RunnerDir, a.cfg.WorkDir); err != nil {
			return err
		}
	}
	return VerifyInstallation(a.cfg.RunnerDir, a.cfg.RunnerManifest)
}

// pruneInstallation removes the entries of the installation's top directory that root does not own
// (what config.sh and the runner wrote there: .runner, .credentials*, .env, .path, _diag, run-helper.sh,
// and anything a job added), except the workspace, which the clean-up empties.
func pruneInstallation(dir, workDir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("pruning runner installation: %w", err)
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == filepath.Clean(workDir) {
			continue
		}
		if owner, ok := fileOwner(p); ok && owner == 0 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pruning runner installation: %w", errors.Join(errs...))
	}
	return nil
}

// VerifyInstallation checks the installation in dir against the sha256sum-format manifest: the
// manifest itself is root-owned and writable by root alone; dir is root-owned and, if others may write
// to it, sticky; every file of the manifest is a root-owned regular file (or a root-owned symbolic link
// that stays inside dir) writable by root alone, below directories writable by root alone, with the
// manifest's SHA-256. Errors wrap ErrInstallationModified when the installation (rather than the
// manifest) is at fault.
func VerifyInstallation(dir, manifest string) error {
	entries, err := readManifest(manifest)
	if err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	var problems []string
	if err := checkOwnedByRoot(dir, true); err != nil {
		problems = append(problems, err.Error())
	}
	dirs := map[string]error{}
	for _, e := range entries {
		for d := filepath.Dir(e.path); d != "."; d = filepath.Dir(d) {
			if _, seen := dirs[d]; seen {
				continue
			}
			dirs[d] = checkOwnedByRoot(filepath.Join(dir, d), false)
			if dirs[d] != nil {
				problems = append(problems, dirs[d].Error())
			}
		}
	}
	problems = append(problems, checkFiles(dir, entries)...)
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	more := ""
	if len(problems) > maxManifestProblems {
		more = fmt.Sprintf(" (and %d more)", len(problems)-maxManifestProblems)
		problems = problems[:maxManifestProblems]
	}
	return fmt.Errorf("%w: %s%s", ErrInstallationModified, strings.Join(problems, "; "), more)
}

// checkFiles hashes the entries in parallel and returns one problem per file that does not match.
func checkFiles(dir string, entries []manifestEntry) []string {
	var (
		mu       sync.Mutex
		problems []string
		g        errgroup.Group // every file is checked: a problem is collected, never cancels the rest
	)
	g.SetLimit(max(runtime.GOMAXPROCS(0), 1))
	for _, e := range entries {
		g.Go(func() error {
			if err := checkFile(dir, e); err != nil {
				mu.Lock()
				problems = append(problems, err.Error())
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return problems
}

// checkFile checks one file of the manifest.
func checkFile(dir string, e manifestEntry) error {
	p := filepath.Join(dir, e.path)
	fi, err := os.Lstat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s is missing", e.path)
		}
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if owner, ok := fileOwner(p); !ok || owner != 0 {
		return fmt.Errorf("%s is owned by uid %d, not root", e.path, owner)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if rel, err := filepath.Rel(dir, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%s links outside the installation (%s)", e.path, target)
		}
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", e.path, fi.Mode().Type())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (%s)", e.path, fi.Mode().Perm())
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.sum {
		return fmt.Errorf("%s has SHA-256 %s, manifest %s", e.path, got, e.sum)
	}
	return nil
}

// checkOwnedByRoot checks that a directory is root's and that nobody else can change its entries (top:
// the installation's top directory, which may be writable by others when it is sticky).
func checkOwnedByRoot(p string, top bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("directory %s: %w", p, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", p, fi.Mode().Type())
	}
	if owner, ok := fileOwner(p); !ok || owner != 0 {
		return fmt.Errorf("directory %s is owned by uid %d, not root", p, owner)
	}
	if fi.Mode().Perm()&0o022 != 0 && !(top && fi.Mode()&fs.ModeSticky != 0) {
		return fmt.Errorf("directory %s is writable by others (%s)", p, fi.Mode())
	}
	return nil
}

// readManifest reads a sha256sum-format manifest ("<hex>  <path>" or "<hex> *<path>", paths relative to
// the installation, ./ allowed) that root alone may write.
func readManifest(path string) ([]manifestEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("runner manifest: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("runner manifest: %w", err)
	}
	if owner, ok := fileOwner(path); !ok || owner != 0 || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("runner manifest %s: must be root's and writable by root alone (owner uid %d, mode %s)", path, owner, fi.Mode().Perm())
	}
	var entries []manifestEntry
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		if !ok || len(sum) != 64 || (!strings.HasPrefix(name, " ") && !strings.HasPrefix(name, "*")) {
			return nil, fmt.Errorf("runner manifest %s line %d: want \"<sha256>  <path>\"", path, n)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("runner manifest %s line %d: %w", path, n, err)
		}
		name = filepath.Clean(name[1:])
		if name == "." || filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("runner manifest %s line %d: path %q is not inside the installation", path, n, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("runner manifest %s line %d: %s listed twice", path, n, name)
		}
		seen[name] = true
		entries = append(entries, manifestEntry{path: name, sum: strings.ToLower(sum)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("runner manifest %s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("runner manifest %s lists no file", path)
	}
	return entries, nil
}

// WriteManifest writes the sha256sum-format manifest of every regular file below dir, except below the
// directories named in skip (relative to dir), to path, root-only; what the user data does with find and
// sha256sum at install time (tests and the simulated instances use it).
func WriteManifest(dir, path string, skip ...string) error {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range skip {
			if rel == filepath.Clean(s) && d.IsDir() {
				return filepath.SkipDir
			}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  ./%s\n", h.Sum(nil), filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing runner manifest: %w", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing runner manifest: %w", err)
	}
	return nil
}
