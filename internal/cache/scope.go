// Package cache is the runner's cache service: it speaks GitHub's cache service v2 (the protocol of
// the published @actions/cache toolkit) on the instance's loopback, keeps what it restored or saved
// on the instance's disk, and stores in the deployment's S3 bucket through URLs the control plane
// presigns for the scope of the run it recorded. This file is the scope: which caches a run may read
// and where it may write, as GitHub defines it, and the object key layout that lets the control plane
// check a presign by prefix.
//
// GitHub's rules ("Restrictions for accessing a cache",
// https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/caching-dependencies-to-speed-up-workflows#restrictions-for-accessing-a-cache):
// a run restores caches created in its own ref or in the default branch; a pull request's run also
// restores its base branch's caches; no run restores caches of child or sibling branches, and no
// repository reads another's. A pull request's run writes under its own ref (refs/pull/N/merge), so
// nothing it saves is read by its base. On top of that, a run whose event is not trusted
// (pool.TrustedEvent false: pull_request and kin, forks included) writes under its own trust level,
// which trusted runs never read, even on the same ref.
package cache

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// ErrInvalid is a request that no run may make (a malformed key or version, a foreign prefix).
var ErrInvalid = errors.New("invalid cache request")

// ErrDenied is a request outside the run's scope.
var ErrDenied = errors.New("outside the run's cache scope")

// Scope is what the control plane knows of the run an instance serves: written by the control plane
// from its own records (the provision's verified OIDC token, the webhook's job), never from what a
// job says.
type Scope struct {
	Repository    string // owner/name
	Ref           string // the run's ref, e.g. refs/heads/feature or refs/pull/7/merge
	BaseRef       string // a pull request's base branch (refs/heads/main); empty otherwise
	DefaultBranch string // the repository's default branch (refs/heads/main)
	Trusted       bool   // pool.TrustedEvent(event)
	// Run is the run record's key; an untrusted run on a branch writes under it (WritePrefix).
	Run string `json:",omitempty"`
	// RepositoryLimit and MaxAge are the cache limits of the instance's runner class (its cache
	// block; 0: the defaults): the control plane refuses a put larger than RepositoryLimit
	// (Authority.Presign), and the agent's server keeps its own disk to both (local.go).
	RepositoryLimit int64         `json:",omitempty"`
	MaxAge          time.Duration `json:",omitempty"`
}

var (
	repoPattern    = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)
	versionPattern = regexp.MustCompile(`^[0-9a-f]{1,128}$`)
)

// MaxKeyLength is the toolkit's own limit (checkKey in @actions/cache's cache.ts).
const MaxKeyLength = 512

// maxEncodedKey keeps an object key within S3's 1,024 bytes with the prefix in front of it.
const maxEncodedKey = 640

// Validate reports whether the scope can name objects.
func (s Scope) Validate() error {
	switch {
	case !repoPattern.MatchString(s.Repository):
		return fmt.Errorf("cache scope: repository %q: %w", s.Repository, ErrInvalid)
	case !strings.HasPrefix(s.Ref, "refs/"):
		return fmt.Errorf("cache scope: ref %q: %w", s.Ref, ErrInvalid)
	case !s.Trusted && strings.HasPrefix(s.Ref, "refs/heads/") && s.Run == "":
		return fmt.Errorf("cache scope: an untrusted run on %q without its run: %w", s.Ref, ErrInvalid)
	}
	return nil
}

// level is the trust level's path segment.
func level(trusted bool) string {
	if trusted {
		return "trusted"
	}
	return "untrusted"
}

// prefix is the object prefix of one (repository, trust level, ref).
func (s Scope) prefix(trusted bool, ref string) string {
	return "v1/" + encode(strings.ToLower(s.Repository)) + "/" + level(trusted) + "/" + encode(ref) + "/"
}

// WritePrefix is where the run saves: its own ref, at its own trust level. An untrusted run whose
// ref is a branch (refs/heads/...) is one whose event nobody vouched for (a workflow_job webhook's
// pool job: its head_branch, and no event), and a fork's pull request from a branch named "main"
// has that very head_branch: such a run writes under its own run (refs/runnerpool/run/<run>), so
// that nothing it saves is read by another run of that branch name. A pull request's own ref
// (refs/pull/N/merge) is the pull request's alone, as GitHub scopes it.
func (s Scope) WritePrefix() string {
	if !s.Trusted && strings.HasPrefix(s.Ref, "refs/heads/") {
		return s.prefix(false, "refs/runnerpool/run/"+s.Run)
	}
	return s.prefix(s.Trusted, s.Ref)
}

// ReadPrefixes are where the run restores from, in GitHub's search order: its own ref, then its
// base branch (a pull request), then the default branch. An untrusted run reads what it wrote
// itself and what trusted runs wrote on its base and default branch (GitHub lets a fork's pull
// request restore its base branch's caches); a trusted run never reads what an untrusted run wrote.
func (s Scope) ReadPrefixes() []string {
	out := []string{s.WritePrefix()}
	add := func(p string) {
		for _, q := range out {
			if q == p {
				return
			}
		}
		out = append(out, p)
	}
	if !s.Trusted {
		add(s.prefix(true, s.Ref))
	}
	if s.BaseRef != "" {
		add(s.prefix(true, s.BaseRef))
	}
	if s.DefaultBranch != "" {
		add(s.prefix(true, s.DefaultBranch))
	}
	return out
}

// ObjectKey is the object of (key, version) under prefix: prefix, version, then the key encoded
// so that it is one path segment whatever it holds ("/", "..", "%"), and so that the encoding of a
// key's prefix is a prefix of the key's encoding (a restore key is listed by prefix).
func ObjectKey(prefix, key, version string) (string, error) {
	p, err := KeyPrefix(prefix, key, version)
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("cache key: empty: %w", ErrInvalid)
	}
	return p, nil
}

// KeyPrefix is the object prefix of every key that starts with key, at version, under prefix.
func KeyPrefix(prefix, key, version string) (string, error) {
	if len(key) > MaxKeyLength || strings.Contains(key, ",") {
		return "", fmt.Errorf("cache key %.40q: longer than %d or holds a comma: %w", key, MaxKeyLength, ErrInvalid)
	}
	if !versionPattern.MatchString(version) {
		return "", fmt.Errorf("cache version %.40q: %w", version, ErrInvalid)
	}
	enc := encode(key)
	if len(enc) > maxEncodedKey {
		return "", fmt.Errorf("cache key %.40q: too many characters to escape: %w", key, ErrInvalid)
	}
	return prefix + version + "/k" + enc, nil
}

// KeyOf returns the cache key of an object key made by ObjectKey.
func KeyOf(objectKey string) (string, bool) {
	i := strings.LastIndex(objectKey, "/k")
	if i < 0 {
		return "", false
	}
	return decode(objectKey[i+2:])
}

// RepositoryOf returns the repository (owner/name, lower case) an object key made by ObjectKey is
// stored under: its second segment, decoded. A segment that is not an escaped owner/name (the
// eviction's use markers under v1/used/) is not a cache object's.
func RepositoryOf(objectKey string) (string, bool) {
	parts := strings.SplitN(objectKey, "/", 3)
	if len(parts) < 3 || parts[0] != "v1" {
		return "", false
	}
	repo, ok := decode(parts[1])
	if !ok || !repoPattern.MatchString(repo) {
		return "", false
	}
	return repo, true
}

// encode keeps letters, digits, '-' and '_' and writes every other byte as '~' and two hex digits:
// no '/', no '.', so no path segment of an object key is ever "..", and encoding is a prefix-
// preserving byte-by-byte map.
func encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "~%02X", c)
	}
	return b.String()
}

func decode(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '~' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		var c byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &c); err != nil {
			return "", false
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), true
}

// Covers reports whether the run may do op on object (or list under it): a read or a list under one
// of its read prefixes, a write under its write prefix. An object key that names anything but a
// plain key (a "..", a second prefix) is never covered.
func (s Scope) Covers(op Op, object string) bool {
	if s.Validate() != nil || strings.Contains(object, "..") || strings.Contains(object, "//") {
		return false
	}
	switch op {
	case OpPut:
		return strings.HasPrefix(object, s.WritePrefix())
	case OpGet, OpList, OpUse:
		for _, p := range s.ReadPrefixes() {
			if strings.HasPrefix(object, p) {
				return true
			}
		}
	}
	return false
}

// Op is what a presigned URL lets its holder do.
type Op string

const (
	OpGet  Op = "get"
	OpPut  Op = "put"
	OpList Op = "list"
)

// ScopeOf is the scope of a run as the control plane knows it: the repository and event of its
// verified OIDC token (or pool job's ledger record), the token's ref and base_ref claims, and the
// repository's default branch (the webhook payload's repository.default_branch, or GitHub's answer
// to GET /repos/{owner}/{repo}: the token does not carry it).
// base_ref is a branch name ("main", as github.base_ref), ref is a full ref; both are normalised to
// full refs ("About security hardening with OpenID Connect", claims ref and base_ref:
// https://docs.github.com/en/actions/security-for-github-actions/security-hardening-your-deployments/about-security-hardening-with-openid-connect).
// The trust level is the event's (pool.TrustedEvent), as for the instance pool's scopes.
func ScopeOf(repository, event, ref, baseRef, defaultBranch string) Scope {
	full := func(b string) string {
		if b == "" || strings.HasPrefix(b, "refs/") {
			return b
		}
		return "refs/heads/" + b
	}
	return Scope{Repository: repository, Ref: ref, BaseRef: full(baseRef), DefaultBranch: full(defaultBranch),
		Trusted: pool.TrustedEvent(event)}
}

// RefOfWorkflowRef is the run's ref a scale set's job message implies: jobWorkflowRef
// ("owner/repo/.github/workflows/ci.yml@refs/heads/main", actions/scaleset types.go
// JobMessageBase; the OIDC token's job_workflow_ref) names the ref the workflow file was read at,
// which is the run's ref (github.ref) when the workflow is the repository's own. A workflow of
// another repository (a reusable one called across repositories) says nothing of the run's ref,
// and neither does a malformed one: "".
func RefOfWorkflowRef(repository, jobWorkflowRef string) string {
	path, ref, ok := strings.Cut(jobWorkflowRef, "@")
	if !ok || !strings.HasPrefix(ref, "refs/") || strings.ContainsFunc(ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) ||
		len(ref) > 1024 || !strings.HasPrefix(strings.ToLower(path), strings.ToLower(repository)+"/.github/workflows/") {
		return ""
	}
	return ref
}

// BranchRef is a branch name made a full ref ("main" -> "refs/heads/main"), "" when the name is
// empty or not printable text of at most 255 bytes (a webhook's head_branch, default_branch).
func BranchRef(branch string) string {
	if branch == "" || len(branch) > 255 || strings.ContainsFunc(branch, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return ""
	}
	if strings.HasPrefix(branch, "refs/") {
		return branch
	}
	return "refs/heads/" + branch
}
