// Trust levels within one repository. A run of a pull request (from a fork above all) runs code
// nobody with write access has accepted; a push, a schedule, a dispatch or a pull_request_target
// run runs the base repository's code, usually with its secrets. An instance whose class keeps
// something across runs (a docker class's images and build cache, anything a root job left) must
// not carry what the first kind left into the second, nor the reverse (an image a push built with
// its secrets). Such an instance is pooled under a scope of its own per trust level: the
// repository's scope for base-repository runs, and that scope with UntrustedSuffix for the
// others. Nothing else changes: ScopeCovers, CoveringScopes and the scope queues treat it as one
// more scope, so one mechanism decides which runs may claim what.
package pool

import "strings"

// UntrustedSuffix marks the pool scope of a repository's runs that may run code the repository
// has not accepted (TrustedEvent false): "acme/app:untrusted". GitHub repository names never hold
// a ':' (letters, digits, '-', '_' and '.'), so no repository's own scope looks like one.
const UntrustedSuffix = ":untrusted"

// TrustedEvent reports whether a run started by event (the OIDC token's event_name claim, a scale
// set job's eventName) runs the base repository's code: every event GitHub documents but
// pull_request and its kin (pull_request_review, pull_request_review_comment), which run the pull
// request's merge commit, a fork's code included ("Events that trigger workflows":
// https://docs.github.com/en/actions/reference/workflows-and-actions/events-that-trigger-workflows).
// pull_request_target is trusted: it "runs in the context of the base of the pull request",
// with the base branch's workflow and code (same page). An empty event (a token or record that
// does not say) is not trusted.
//
// A fork's pull_request run cannot ask for an OIDC token in a public repository (its
// GITHUB_TOKEN is read-only, so no id-token: write); a private repository can let it ("Send write
// tokens to workflows from fork pull requests",
// https://docs.github.com/en/repositories/managing-your-repositorys-settings-and-features/enabling-features-for-your-repository/managing-github-actions-settings-for-a-repository#enabling-workflows-for-fork-pull-requests-in-private-repositories),
// and a pull request from one of the repository's own branches always can: both are kept apart.
func TrustedEvent(event string) bool {
	return event != "" && (!strings.HasPrefix(event, "pull_request") || event == "pull_request_target")
}

// RunScope is the pool scope a run of repository started by event releases instances into, and
// claims released instances from: the repository's (lower case), or, when the runner class keeps
// something across runs (keeps) and the event is not trusted, its untrusted scope. A class that
// keeps nothing across runs shares the repository's scope between both levels.
func RunScope(repository, event string, keeps bool) string {
	scope := strings.ToLower(repository)
	if keeps && strings.Contains(scope, "/") && !TrustedEvent(event) {
		return scope + UntrustedSuffix
	}
	return scope
}

// GitHubScope is the GitHub repository or owner of a pool scope: what runners of it register in
// and are removed from.
func GitHubScope(scope string) string {
	s, _ := strings.CutSuffix(scope, UntrustedSuffix)
	return s
}
