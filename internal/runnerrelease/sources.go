// sources.go: where the current release is read, in order, and what each source needs of the
// credential (GitHub's REST reference; ghaccess.Calls lists the same, and
// docs/guides/github-credentials.md renders it):
//
//  1. GET /repos/{owner}/{repo}/actions/runners/downloads, for each repository scope: the
//     "Administration" repository permission (read), classic scope repo.
//  2. GET /orgs/{org}/actions/runners/downloads, for each owner scope: the organisation's
//     "Self-hosted runners" permission (read), classic scope admin:org. Only owner-level runners
//     need it otherwise, so an App without it is common; GitHub answers 403.
//  3. GET /enterprises/{enterprise}/actions/runners/downloads, when an enterprise is configured
//     (Options.Enterprise): a classic PAT with manage_runners:enterprise; GitHub App installation
//     tokens and fine-grained PATs cannot call it at all, so with an App it is skipped without a call.
//  4. GET /repos/actions/runner/releases: public, any credential (or none).
//
// A downloads endpoint answers for its scope (a release rolled out progressively is the one that
// scope's runners get), so it goes first; the public list gives the publication dates either way.
package runnerrelease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// SourcePublic names the public releases of actions/runner as a source.
const SourcePublic = "public releases of actions/runner"

// SourceDownloads names the downloads endpoint of scope as a source.
func SourceDownloads(scope string) string { return "downloads endpoint of " + scope }

// SourceEnterprise names the downloads endpoint of an enterprise as a source.
func SourceEnterprise(enterprise string) string { return SourceDownloads("enterprise " + enterprise) }

// EnterpriseSource reads an enterprise's downloads endpoint; *ghaccess.Client satisfies it.
type EnterpriseSource interface {
	EnterpriseRunnerRelease(ctx context.Context, enterprise string) (runnerversion.Release, error)
}

// Needs is what the credential needs to read source: the App (and fine-grained PAT) permission
// and the classic PAT scope.
func Needs(source string) string {
	scope, ok := strings.CutPrefix(source, SourceDownloads(""))
	switch {
	case !ok:
		return "no permission (a public repository), but api.github.com must be reachable"
	case strings.HasPrefix(scope, "enterprise "):
		return "a classic PAT with manage_runners:enterprise (a GitHub App or a fine-grained PAT cannot read it)"
	case strings.Contains(scope, "/"):
		return "the repository's Administration permission (read; classic PAT scope repo)"
	default:
		return "the organisation's Self-hosted runners permission, organization_self_hosted_runners (read; classic PAT scope admin:org)"
	}
}

// answer is what the sources gave.
type answer struct {
	Release  runnerversion.Release
	Source   string
	Releases []runnerversion.Release // every published release, dates only; nil when unread
	Skipped  []string                // sources tried before, with their errors
}

// UnreadableError is a refresh that no source answered: each source, its error and what it needs.
type UnreadableError struct {
	Tried []SourceError
}

// SourceError is one source's failure.
type SourceError struct {
	Source string
	Err    error
}

func (e *UnreadableError) Error() string {
	parts := make([]string, 0, len(e.Tried))
	for _, t := range e.Tried {
		parts = append(parts, fmt.Sprintf("%s (needs %s): %v", t.Source, Needs(t.Source), t.Err))
	}
	return "runner release: no source answered: " + strings.Join(parts, "; ")
}

func (e *UnreadableError) Unwrap() []error {
	out := make([]error, 0, len(e.Tried))
	for _, t := range e.Tried {
		out = append(out, t.Err)
	}
	return out
}

// ordered is the scopes, repositories first (their endpoint needs no more than registering does).
func ordered(scopes []string) []string {
	out := slices.Clone(scopes)
	slices.SortStableFunc(out, func(a, b string) int {
		ra, rb := strings.Contains(a, "/"), strings.Contains(b, "/")
		switch {
		case ra == rb:
			return 0
		case ra:
			return -1
		}
		return 1
	})
	return out
}

// read asks the sources in order.
func (c *Cache) read(ctx context.Context) (answer, error) {
	var tried []SourceError
	releases, perr := c.published(ctx)
	for _, scope := range ordered(c.o.Scopes) {
		rel, err := c.src.RunnerRelease(ctx, scope)
		if err == nil {
			return answer{Release: rel, Source: SourceDownloads(scope), Releases: dates(releases), Skipped: skipped(tried)}, nil
		}
		tried = append(tried, SourceError{SourceDownloads(scope), err})
		if ctx.Err() != nil {
			return answer{}, &UnreadableError{tried}
		}
	}
	if ent, ok := c.src.(EnterpriseSource); ok && c.o.Enterprise != "" {
		rel, err := ent.EnterpriseRunnerRelease(ctx, c.o.Enterprise)
		if err == nil {
			return answer{Release: rel, Source: SourceEnterprise(c.o.Enterprise), Releases: dates(releases), Skipped: skipped(tried)}, nil
		}
		tried = append(tried, SourceError{SourceEnterprise(c.o.Enterprise), err})
	}
	if perr == nil {
		if rel, ok := newest(releases); ok {
			return answer{Release: rel, Source: SourcePublic, Releases: dates(releases), Skipped: skipped(tried)}, nil
		}
		perr = errors.New("no published release with Linux x64 and arm64 files and checksums")
	}
	tried = append(tried, SourceError{SourcePublic, perr})
	return answer{}, &UnreadableError{tried}
}

// published reads the public releases with the first scope credential that can.
func (c *Cache) published(ctx context.Context) ([]runnerversion.Release, error) {
	var errs []error
	for _, scope := range c.o.Scopes {
		rels, err := c.src.PublishedRunnerReleases(ctx, scope)
		if err == nil {
			return rels, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// newest is the newest release that can be installed (both architectures, checksums).
func newest(releases []runnerversion.Release) (runnerversion.Release, bool) {
	var best runnerversion.Release
	for _, r := range releases {
		if r.Validate() != nil {
			continue
		}
		if best.Version == "" || runnerversion.MustParse(best.Version).Less(runnerversion.MustParse(r.Version)) {
			best = r
		}
	}
	return best, best.Version != ""
}

// dates is releases without their downloads: what the table keeps of them.
func dates(releases []runnerversion.Release) []runnerversion.Release {
	out := make([]runnerversion.Release, 0, len(releases))
	for _, r := range releases {
		out = append(out, runnerversion.Release{Version: r.Version, Published: r.Published})
	}
	return out
}

func skipped(tried []SourceError) []string {
	var out []string
	for _, t := range tried {
		out = append(out, t.Source+": "+t.Err.Error())
	}
	return out
}

// Check is the start-up check: a refresh, which must find a release somewhere unless the compiled
// default still serves. It fails, naming what each source needs, when no source answered, the table
// holds no release either, and runnerversion.Default is more than GitHub's 30-day window old: GitHub
// stops giving jobs to a runner 30 days after the next release, and runner releases follow each
// other within weeks, so past that the instances would install a runner GitHub may already refuse.
// A source that fails while a release is known is only logged: the refresh keeps trying.
func (c *Cache) Check(ctx context.Context) error {
	rel, err := c.Refresh(ctx)
	if err == nil {
		return nil
	}
	if _, known := c.Current(); known {
		c.o.Logger.WarnContext(ctx, "runner release: no source answered at start-up; keeping the release the table holds", "version", rel.Version, "err", err)
		return nil
	}
	now, def := c.o.Now(), runnerversion.Default
	if now.Sub(def.Published) <= runnerversion.AssignmentWindow {
		c.o.Logger.WarnContext(ctx, "runner release: no source answered at start-up; instances install the compiled default until one does",
			"default", def.Version, "err", err)
		return nil
	}
	return fmt.Errorf("the compiled runner release %s was published %s, more than 30 days ago, so GitHub may already refuse its runners, and no source of the current release can be read: %w",
		def.Version, def.Published.Format(time.DateOnly), err)
}
