// Package ghaccess is the control plane's access to GitHub: short-lived runner registration and
// removal tokens, just-in-time runner configurations, the runner list, and cancelling a run. It
// authenticates as a GitHub App (installation tokens, minted per owner by ghinstallation) or with a
// personal access token; either credential stays in the reconciler and never reaches an instance.
package ghaccess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
	// ghinst is the go-github major ghinstallation is built on (its token options type).
	ghinst "github.com/google/go-github/v88/github"
)

// Config says where GitHub is and how to authenticate. Exactly one of Token or (AppID and
// PrivateKeyPEM) is required.
type Config struct {
	// APIURL is the REST API base: https://api.github.com/ (default), https://HOST/api/v3/ for GHES,
	// or the local fake's URL.
	APIURL string
	// ServerURL is the web base runners register against (https://github.com by default; derived
	// from APIURL for GHES and the fake).
	ServerURL string
	// Token is a personal access token (fine-grained or classic) with administration rights on the
	// repositories or organisations runners serve.
	Token string
	// AppID and PrivateKeyPEM authenticate as a GitHub App; the installation of each owner is found
	// on first use and its tokens are refreshed by ghinstallation.
	AppID         int64
	PrivateKeyPEM []byte
	// HTTPClient gives the base transport and, as its Timeout, the timeout of one attempt of a
	// request (default 30 s).
	HTTPClient *http.Client
	// MaxRetryWait caps one wait for a rate limit or an outage (a longer retry-after is taken as this),
	// and all the waits of a call whose context has no deadline (default 60 s). With a deadline, a
	// call retries until its deadline.
	MaxRetryWait time.Duration
	// InstallationTTL is how long an owner's App installation is kept before it is looked up again
	// (default 1 h); an answer saying it is gone drops it at once.
	InstallationTTL time.Duration
	// TokenMargin: a registration or remove token is reused until TokenMargin before it expires, and
	// refreshed in the background from twice that (default 15 min; GitHub's tokens last one hour).
	TokenMargin time.Duration
	// ListingInterval is the least time between the starts of two runner listings of one scope
	// (0: none). Every check of a scope that asks meanwhile joins the next listing, so a scope's
	// listings cost at most one per interval however many runners are released (listings.go).
	ListingInterval time.Duration
	// ListingPagesPerMinute caps the runner listing pages of all scopes together (0: no cap), a
	// share of GitHub's secondary limit (900 points a minute, a page costs one): past it listings
	// wait, and the checks of each scope gather on fewer of them, instead of GitHub refusing.
	ListingPagesPerMinute int
	// DefaultBranchTTL is how long a repository's default branch is kept before it is asked again
	// (default 10 min; repos.go).
	DefaultBranchTTL time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger

	// Allowed are the repositories ("owner/repo") and owners ("owner", meaning all of its
	// repositories) runner credentials (registration and remove tokens, JIT configs) may be minted
	// for: the deployment's allow-list. A scope outside it is refused with ErrScopeNotAllowed before
	// any call to GitHub. Nil allows every scope (tests of this package only; the reconciler always
	// sets it).
	Allowed []string
	// OwnerRunners are the owners for which owner-level (organisation) credentials may be minted;
	// an owner scope not listed here is refused even when Allowed names the owner. Only read when
	// Allowed is set.
	OwnerRunners []string
}

// ErrScopeNotAllowed is returned when a runner credential is asked for a scope outside the
// deployment's allow-list.
var ErrScopeNotAllowed = errors.New("scope not allowed")

// mayMint reports whether runner credentials may be minted for owner/repo (repo empty: the owner).
func (c *Client) mayMint(scope, owner, repo string) error {
	if c.cfg.Allowed == nil {
		return nil
	}
	if repo == "" {
		for _, o := range c.cfg.OwnerRunners {
			if strings.EqualFold(o, owner) {
				for _, a := range c.cfg.Allowed {
					if strings.EqualFold(a, owner) {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("github scope %q: owner-level runner credentials are not enabled for this owner: %w", scope, ErrScopeNotAllowed)
	}
	for _, a := range c.cfg.Allowed {
		if strings.EqualFold(a, owner) || strings.EqualFold(a, owner+"/"+repo) {
			return nil
		}
	}
	return fmt.Errorf("github scope %q: not in the deployment's allowed repositories: %w", scope, ErrScopeNotAllowed)
}

// RunnerToken is a registration or remove token and the URL it registers against.
type RunnerToken struct {
	Token     string
	ExpiresAt time.Time
	URL       string // https://github.com/OWNER/REPO or https://github.com/OWNER
}

// Runner is a self-hosted runner as GitHub lists it.
type Runner struct {
	ID     int64
	Name   string
	Status string // "online" or "offline"
	Busy   bool
	Labels []string
}

// Client is the control plane's GitHub client.
type Client struct {
	cfg      Config
	apiURL   *url.URL
	server   string
	log      *slog.Logger
	apps     *ghinstallation.AppsTransport // nil with a PAT
	rt       *retryTransport               // under every request (retry.go)
	now      func() time.Time
	mu       sync.Mutex
	clients  map[string]ownerClient // by lower-case owner
	tokens   *tokenCache            // registration and remove tokens per scope (tokens.go)
	listings *listings              // shared runner listings per scope (listings.go)
	branches map[string]branchEntry // default branches by lower-case owner/name (repos.go)
}

// ownerClient is the API client of one owner and when its installation is to be looked up again.
type ownerClient struct {
	gc      *github.Client
	expires time.Time
}

// New validates the configuration and returns a client. No call is made until first use.
func New(cfg Config) (*Client, error) {
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api.github.com/"
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/"
	}
	u, err := url.Parse(cfg.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("github api url %q: must be an http(s) URL", cfg.APIURL)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = 60 * time.Second
	}
	if cfg.InstallationTTL <= 0 {
		cfg.InstallationTTL = time.Hour
	}
	if cfg.TokenMargin <= 0 {
		cfg.TokenMargin = 15 * time.Minute
	}
	if cfg.DefaultBranchTTL <= 0 {
		cfg.DefaultBranchTTL = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	base := cfg.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	attempt := cfg.HTTPClient.Timeout
	if attempt <= 0 {
		attempt = 30 * time.Second
	}
	c := &Client{cfg: cfg, apiURL: u, log: cfg.Logger, now: cfg.Now, clients: map[string]ownerClient{}, branches: map[string]branchEntry{},
		rt: &retryTransport{base: base, attempt: attempt, maxWait: cfg.MaxRetryWait, log: cfg.Logger, now: time.Now}}
	c.tokens = newTokenCache(c)
	c.listings = newListings(c, cfg.ListingInterval, cfg.ListingPagesPerMinute)
	c.server = cfg.ServerURL
	if c.server == "" {
		c.server = deriveServerURL(u)
	}
	c.server = strings.TrimSuffix(c.server, "/")
	switch {
	case cfg.Token != "" && cfg.AppID != 0:
		return nil, errors.New("github: configure either a token or an app, not both")
	case cfg.Token != "":
	case cfg.AppID != 0 && len(cfg.PrivateKeyPEM) > 0:
		atr, err := ghinstallation.NewAppsTransport(c.rt, cfg.AppID, cfg.PrivateKeyPEM)
		if err != nil {
			return nil, fmt.Errorf("github app %d: private key: %w", cfg.AppID, err)
		}
		atr.BaseURL = strings.TrimSuffix(cfg.APIURL, "/")
		c.apps = atr
	default:
		return nil, errors.New("github: a token or an app id with its private key is required")
	}
	return c, nil
}

// deriveServerURL maps an API URL to the web URL runners register against: api.github.com ->
// github.com; GHES https://HOST/api/v3/ -> https://HOST; anything else (the local fake) -> its own
// base.
func deriveServerURL(u *url.URL) string {
	if u.Host == "api.github.com" {
		return "https://github.com"
	}
	base := *u
	base.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v3")
	return strings.TrimSuffix(base.String(), "/")
}

var (
	ownerRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	repoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// ParseScope splits "owner/repo" or "owner" and validates both parts.
func ParseScope(scope string) (owner, repo string, err error) {
	owner, repo, _ = strings.Cut(scope, "/")
	if !ownerRE.MatchString(owner) || (strings.Contains(scope, "/") && !repoRE.MatchString(repo)) || repo == "." || repo == ".." {
		return "", "", fmt.Errorf("github scope %q: want OWNER or OWNER/REPO", scope)
	}
	return owner, repo, nil
}

// client returns the API client for an owner: the PAT client, or one bound to the owner's App
// installation, looked up on first use and kept for InstallationTTL (or until GitHub says the
// installation is gone). The lookup runs outside the mutex: one slow owner does not hold up others.
func (c *Client) client(ctx context.Context, owner, repo string) (*github.Client, error) {
	key := strings.ToLower(owner)
	c.mu.Lock()
	e, ok := c.clients[key]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return e.gc, nil
	}
	gc, err := c.newOwnerClient(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clients[key] = ownerClient{gc: gc, expires: c.now().Add(c.cfg.InstallationTTL)}
	c.mu.Unlock()
	return gc, nil
}

// forget drops the cached client of an owner: its installation is looked up again on next use.
func (c *Client) forget(owner string) {
	c.mu.Lock()
	delete(c.clients, strings.ToLower(owner))
	c.mu.Unlock()
	c.log.Warn("github: the app installation of an owner looks gone, looking it up again on next use", "owner", owner)
}

// installationGone reports an answer saying the installation (or its token) is no longer valid:
// the installation token could not be minted, or GitHub answered 401 or 404 for it.
func installationGone(resp *github.Response, err error) bool {
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) {
		return true
	}
	return resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusNotFound)
}

// findInstallation looks up the App installation of a repository (repo set) or an owner, as the App.
func (c *Client) findInstallation(ctx context.Context, owner, repo string) (*github.Installation, error) {
	appClient, err := c.newClient(&http.Client{Transport: c.apps})
	if err != nil {
		return nil, err
	}
	var inst *github.Installation
	if repo != "" {
		inst, _, err = appClient.Apps.FindRepositoryInstallation(ctx, owner, repo)
	} else {
		inst, _, err = appClient.Apps.FindOrganizationInstallation(ctx, owner)
	}
	if err != nil {
		return nil, fmt.Errorf("finding the app installation of %s: %w", owner, err)
	}
	return inst, nil
}

func (c *Client) newOwnerClient(ctx context.Context, owner, repo string) (*github.Client, error) {
	if c.apps == nil {
		gc, err := c.newClient(&http.Client{Transport: c.rt})
		if err != nil {
			return nil, err
		}
		return gc.WithAuthToken(c.cfg.Token), nil
	}
	inst, err := c.findInstallation(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	tr := ghinstallation.NewFromAppsTransport(c.apps, inst.GetID())
	tr.BaseURL = c.apps.BaseURL
	// Without options ghinstallation posts the JSON body null, which GitHub's description of
	// POST /app/installations/{id}/access_tokens does not allow (an object); send {}.
	tr.InstallationTokenOptions = &ghinst.InstallationTokenOptions{}
	return c.newClient(&http.Client{Transport: tr})
}

func (c *Client) newClient(hc *http.Client) (*github.Client, error) {
	gc, err := github.NewClient(hc).WithEnterpriseURLs(c.cfg.APIURL, c.cfg.APIURL)
	if err != nil {
		return nil, fmt.Errorf("github client for %s: %w", c.cfg.APIURL, err)
	}
	// WithEnterpriseURLs appends api/v3/ to hosts that lack it; the configured URL is already the
	// API base, so set it as given.
	gc.BaseURL = c.apiURL
	return gc, nil
}

// call runs one GitHub operation (the transport has retried what GitHub refused) and names it in
// the error. go-github itself refuses, without a request, every call made while the primary limit
// it last saw is spent: that is waited out here, until the reset, within the caller's deadline. An
// answer that says the owner's installation is gone drops the cached client of the owner.
func (c *Client) call(ctx context.Context, owner, op string, fn func() (*github.Response, error)) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.MaxRetryWait)
	}
	for {
		resp, err := fn()
		if err == nil {
			return nil
		}
		if installationGone(resp, err) {
			c.forget(owner)
		}
		var rl *github.RateLimitError
		if !errors.As(err, &rl) {
			return fmt.Errorf("github %s: %w", op, err)
		}
		wait := max(time.Until(rl.Rate.Reset.Time)+time.Second, minWait)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("github %s: primary rate limit spent until %s, past the caller's deadline: %w", op, rl.Rate.Reset.Time.Format(time.RFC3339), err)
		}
		c.log.WarnContext(ctx, "github primary rate limit spent, waiting for its reset", "op", op, "wait", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("github %s: waiting for the rate limit reset: %w", op, ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Client) scopeURL(owner, repo string) string {
	if repo == "" {
		return c.server + "/" + owner
	}
	return c.server + "/" + owner + "/" + repo
}

// RegistrationToken returns a registration token for the scope (valid one hour; reused while it is).
func (c *Client) RegistrationToken(ctx context.Context, scope string) (RunnerToken, error) {
	return c.runnerToken(ctx, scope, "registration token", func(ctx context.Context, gc *github.Client, owner, repo string) (*github.Timestamp, string, *github.Response, error) {
		var t *github.RegistrationToken
		var resp *github.Response
		var err error
		if repo == "" {
			t, resp, err = gc.Actions.CreateOrganizationRegistrationToken(ctx, owner)
		} else {
			t, resp, err = gc.Actions.CreateRegistrationToken(ctx, owner, repo)
		}
		if err != nil {
			return nil, "", resp, err
		}
		return t.ExpiresAt, t.GetToken(), resp, nil
	})
}

// RemoveToken returns a token that removes runners of the scope (valid one hour; reused while it is).
func (c *Client) RemoveToken(ctx context.Context, scope string) (RunnerToken, error) {
	return c.runnerToken(ctx, scope, "remove token", func(ctx context.Context, gc *github.Client, owner, repo string) (*github.Timestamp, string, *github.Response, error) {
		var t *github.RemoveToken
		var resp *github.Response
		var err error
		if repo == "" {
			t, resp, err = gc.Actions.CreateOrganizationRemoveToken(ctx, owner)
		} else {
			t, resp, err = gc.Actions.CreateRemoveToken(ctx, owner, repo)
		}
		if err != nil {
			return nil, "", resp, err
		}
		return t.ExpiresAt, t.GetToken(), resp, nil
	})
}

// runnerToken returns a registration or remove token of the scope, reused while it is valid
// (tokens.go).
func (c *Client) runnerToken(ctx context.Context, scope, what string, get func(context.Context, *github.Client, string, string) (*github.Timestamp, string, *github.Response, error)) (RunnerToken, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return RunnerToken{}, err
	}
	if err := c.mayMint(scope, owner, repo); err != nil {
		return RunnerToken{}, fmt.Errorf("%s: %w", what, err)
	}
	return c.tokens.get(ctx, what, scope, func(ctx context.Context) (RunnerToken, error) {
		gc, err := c.client(ctx, owner, repo)
		if err != nil {
			return RunnerToken{}, err
		}
		var tok RunnerToken
		err = c.call(ctx, owner, what+" for "+scope, func() (*github.Response, error) {
			exp, token, resp, err := get(ctx, gc, owner, repo)
			if err != nil {
				return resp, err
			}
			if token == "" {
				return resp, fmt.Errorf("empty token in response")
			}
			tok = RunnerToken{Token: token, URL: c.scopeURL(owner, repo)}
			if exp != nil {
				tok.ExpiresAt = exp.Time
			}
			return resp, nil
		})
		return tok, err
	})
}

// ListRunners lists every self-hosted runner of the scope (all pages), as GitHub holds them at some
// moment after the call: concurrent callers of a scope share listings (listings.go).
func (c *Client) ListRunners(ctx context.Context, scope string) ([]Runner, error) {
	if _, _, err := ParseScope(scope); err != nil {
		return nil, err
	}
	return c.listings.get(ctx, scope)
}

// listRunners makes one listing of the scope's runners.
func (c *Client) listRunners(ctx context.Context, scope string) ([]Runner, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return nil, err
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	var out []Runner
	opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		if err := c.listings.pages.Wait(ctx); err != nil {
			return nil, fmt.Errorf("listing the runners of %s: waiting for the listing budget: %w", scope, err)
		}
		var page *github.Runners
		var resp *github.Response
		err := c.call(ctx, owner, "list runners of "+scope, func() (*github.Response, error) {
			var err error
			if repo == "" {
				page, resp, err = gc.Actions.ListOrganizationRunners(ctx, owner, opts)
			} else {
				page, resp, err = gc.Actions.ListRunners(ctx, owner, repo, opts)
			}
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Runners {
			rr := Runner{ID: r.GetID(), Name: r.GetName(), Status: r.GetStatus(), Busy: r.GetBusy()}
			for _, l := range r.Labels {
				rr.Labels = append(rr.Labels, l.GetName())
			}
			out = append(out, rr)
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// ErrRunnerNotFound is GetRunner's answer for a runner the scope does not have (GitHub's 404).
var ErrRunnerNotFound = errors.New("runner not found")

// GetRunner reads one runner of the scope by its id: GET /repos/{owner}/{repo}/actions/runners/{runner_id}
// or GET /orgs/{org}/actions/runners/{runner_id} (GitHub's REST reference, "Get a self-hosted runner
// for a repository" and "... for an organization"). A runner the scope does not have (never had, or
// removed: an ephemeral runner after its job) is GitHub's 404, returned as ErrRunnerNotFound; GitHub
// also answers 404 for a resource the credential may not read (GitHub Docs, "Troubleshooting the
// REST API"), so a caller trusts it only where the same credential just read the scope's runners.
// Unlike a listing, it reads the one runner at one moment: no page of it can be skipped. A scale set's
// just-in-time runner is read by the id its JIT configuration gave (the Actions service's agent id,
// which GitHub's own runner also uses as its REST id; internal/pooljob runner.go has the sources).
func (c *Client) GetRunner(ctx context.Context, scope string, id int64) (Runner, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return Runner{}, err
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return Runner{}, err
	}
	var out Runner
	gone := false
	err = c.call(ctx, owner, fmt.Sprintf("get runner %d of %s", id, scope), func() (*github.Response, error) {
		var r *github.Runner
		var resp *github.Response
		var err error
		if repo == "" {
			r, resp, err = gc.Actions.GetOrganizationRunner(ctx, owner, id)
		} else {
			r, resp, err = gc.Actions.GetRunner(ctx, owner, repo, id)
		}
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			// An answer about the runner, not the installation: the owner's client is kept.
			gone = true
			return resp, nil
		}
		if err != nil {
			return resp, err
		}
		out = Runner{ID: r.GetID(), Name: r.GetName(), Status: r.GetStatus(), Busy: r.GetBusy()}
		for _, l := range r.Labels {
			out.Labels = append(out.Labels, l.GetName())
		}
		return resp, nil
	})
	if err == nil && gone {
		err = fmt.Errorf("runner %d of %s: %w", id, scope, ErrRunnerNotFound)
	}
	return out, err
}

// DeleteRunner removes a runner of the scope. A runner that is already gone is not an error.
func (c *Client) DeleteRunner(ctx context.Context, scope string, id int64) error {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return err
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return err
	}
	return c.call(ctx, owner, fmt.Sprintf("delete runner %d of %s", id, scope), func() (*github.Response, error) {
		var resp *github.Response
		if repo == "" {
			resp, err = gc.Actions.RemoveOrganizationRunner(ctx, owner, id)
		} else {
			resp, err = gc.Actions.RemoveRunner(ctx, owner, repo, id)
		}
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return resp, nil // already gone: done
		}
		return resp, err
	})
}

// JITConfig is a just-in-time runner configuration: the runner exists at GitHub from the moment it
// is generated, is ephemeral (GitHub removes it after one job) and needs no registration token on
// the instance. Encoded is what `run.sh --jitconfig` takes.
type JITConfig struct {
	Encoded    string
	RunnerID   int64
	RunnerName string
}

// DefaultRunnerGroup is the id of the Default runner group; repository runners are always in it.
const DefaultRunnerGroup = 1

// GenerateJITConfig creates a just-in-time runner named name with labels in scope ("owner/repo"
// or "owner") and returns its encoded configuration. Repository runners must be in the Default
// group (GitHub refuses another id for them), so runnerGroupID is only used for an owner scope (0:
// Default). A name already taken in the scope is an error (GitHub answers 409).
func (c *Client) GenerateJITConfig(ctx context.Context, scope, name string, labels []string, runnerGroupID int64) (JITConfig, error) {
	owner, repo, err := ParseScope(scope)
	if err != nil {
		return JITConfig{}, err
	}
	if err := c.mayMint(scope, owner, repo); err != nil {
		return JITConfig{}, fmt.Errorf("jit config: %w", err)
	}
	if strings.TrimSpace(name) == "" || len(labels) == 0 {
		return JITConfig{}, fmt.Errorf("jit config for %s: a runner name and at least one label are required", scope)
	}
	if repo != "" || runnerGroupID <= 0 {
		runnerGroupID = DefaultRunnerGroup
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return JITConfig{}, err
	}
	req := &github.GenerateJITConfigRequest{Name: name, RunnerGroupID: runnerGroupID, Labels: labels}
	var out JITConfig
	err = c.call(ctx, owner, "jit config "+name+" for "+scope, func() (*github.Response, error) {
		var cfg *github.JITRunnerConfig
		var resp *github.Response
		var err error
		if repo == "" {
			cfg, resp, err = gc.Actions.GenerateOrgJITConfig(ctx, owner, req)
		} else {
			cfg, resp, err = gc.Actions.GenerateRepoJITConfig(ctx, owner, repo, req)
		}
		if err != nil {
			return resp, err
		}
		if cfg.GetEncodedJITConfig() == "" {
			return resp, fmt.Errorf("empty encoded_jit_config in response")
		}
		out = JITConfig{Encoded: cfg.GetEncodedJITConfig(), RunnerID: cfg.GetRunner().GetID(), RunnerName: cfg.GetRunner().GetName()}
		if out.RunnerName == "" {
			out.RunnerName = name
		}
		return resp, nil
	})
	return out, err
}

// CancelRun cancels a workflow run of repo ("owner/name"), e.g. when a job asks for an unknown pool.
func (c *Client) CancelRun(ctx context.Context, repoScope string, runID int64) error {
	owner, repo, err := ParseScope(repoScope)
	if err != nil {
		return err
	}
	if repo == "" {
		return fmt.Errorf("cancel run %d: %q is not a repository", runID, repoScope)
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return err
	}
	err = c.call(ctx, owner, fmt.Sprintf("cancel run %d of %s", runID, repoScope), func() (*github.Response, error) {
		return gc.Actions.CancelWorkflowRunByID(ctx, owner, repo, runID)
	})
	// go-github reports the 202 Accepted of a cancel as an *AcceptedError: the cancel was queued.
	var accepted *github.AcceptedError
	if errors.As(err, &accepted) {
		return nil
	}
	return err
}

// JobStatus returns a workflow job's status as GitHub holds it: queued, in_progress, completed, ...
func (c *Client) JobStatus(ctx context.Context, repoScope string, jobID int64) (string, error) {
	owner, repo, err := ParseScope(repoScope)
	if err != nil {
		return "", err
	}
	if repo == "" {
		return "", fmt.Errorf("job %d: %q is not a repository", jobID, repoScope)
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return "", err
	}
	var status string
	err = c.call(ctx, owner, fmt.Sprintf("job %d of %s", jobID, repoScope), func() (*github.Response, error) {
		job, resp, err := gc.Actions.GetWorkflowJobByID(ctx, owner, repo, jobID)
		status = job.GetStatus()
		return resp, err
	})
	return status, err
}

// RerunFailedJobs re-runs the failed jobs of a workflow run of repo ("owner/name"): a pool job whose
// runner was reclaimed (a spot interruption) runs again on other capacity.
func (c *Client) RerunFailedJobs(ctx context.Context, repoScope string, runID int64) error {
	owner, repo, err := ParseScope(repoScope)
	if err != nil {
		return err
	}
	if repo == "" {
		return fmt.Errorf("rerun of run %d: %q is not a repository", runID, repoScope)
	}
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return err
	}
	return c.call(ctx, owner, fmt.Sprintf("rerun the failed jobs of run %d of %s", runID, repoScope), func() (*github.Response, error) {
		return gc.Actions.RerunFailedJobsByID(ctx, owner, repo, runID)
	})
}
