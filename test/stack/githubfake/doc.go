// Package githubfake is a stateful, in-memory fake of the parts of the GitHub REST API that runnerpool
// uses, served over real HTTP so that the reconciler (through go-github and ghinstallation), the instance
// agent and a fake actions-runner program talk to it exactly as they would to api.github.com.
//
// # Mounting
//
// *Server is an http.Handler; its base URL is wherever it is mounted. A leading "/api/v3" (the GitHub
// Enterprise Server prefix that go-github's WithEnterpriseURLs appends) is accepted and stripped, so both
//
//	gh := github.NewClient(nil).WithAuthToken(fake.PAT())
//	gh.BaseURL, _ = url.Parse(srv.URL + "/")
//
// and
//
//	gh, _ := github.NewClient(nil).WithAuthToken(fake.PAT()).WithEnterpriseURLs(srv.URL+"/", srv.URL+"/")
//
// work. For GitHub App authentication give ghinstallation the fake's key and the server URL as BaseURL:
//
//	atr, _ := ghinstallation.NewAppsTransport(http.DefaultTransport, appID, fake.AppPrivateKeyPEM())
//	atr.BaseURL = srv.URL
//	itr := ghinstallation.NewFromAppsTransport(atr, fake.AddInstallation("acme"))
//	itr.BaseURL = srv.URL
//
// # Credentials
//
// App endpoints (/app, /app/installations..., GET .../installation) take "Authorization: Bearer <JWT>"
// signed RS256 with the App key, iss = the App id. The JWT's iat/exp are checked against the wall clock
// (not Options.Now), because clients sign them with the wall clock. Everything else takes an installation
// token (from POST /app/installations/{id}/access_tokens, valid 1h on Options.Now, limited to the
// installation's owner and, if asked for, to some repositories) or the PAT, as "token X" or "Bearer X".
// Bad or missing credentials answer 401 {"message":"Bad credentials"}.
//
// # Runner protocol (fake only)
//
// A real actions runner registers with config.sh (registration token or JIT config), opens a session,
// long-polls for jobs, runs them, and is removed with a remove token. The fake offers the same life cycle
// under /_runner/ (not subject to injected rate-limit faults), and RunnerClient speaks it:
//
//	rc := githubfake.NewRunnerClient(srv.URL, nil)
//	reg, err := rc.Register(ctx, githubfake.RegisterOptions{Token: regToken, Name: "i-0abc", Labels: []string{"run-42"}})
//	// or rc.Register(ctx, githubfake.RegisterOptions{JITConfig: encodedJITConfig})
//	err = rc.Connect(ctx)                       // the runner shows "online"
//	job, err := rc.NextJob(ctx, 30*time.Second) // nil, nil when no job came in time; busy once it has one
//	err = rc.Complete(ctx, job.ID, "success")   // not busy; an ephemeral (or JIT) runner is deleted, as on GitHub
//	err = rc.Disconnect(ctx)                    // "offline"
//	err = rc.Deregister(ctx, removeToken)       // config.sh remove: deletes the runner
//
// A job is handed to a runner only when the runner's scope covers the job's repository (same repository,
// or an organization runner of the repository's owner) and every runs-on label of the job is one of the
// runner's labels (case-insensitively; every runner has the read-only labels self-hosted, its OS and its
// architecture). When a runner is deleted through the REST API while it waits for a job, NextJob returns
// ErrRunnerRemoved, as a real runner is told its registration was removed.
//
// Tests queue jobs with Server.QueueJob and watch them with Server.Job. When Options.Webhook is set, the
// fake also delivers workflow_job webhooks (queued, in_progress, completed) for those jobs, in order.
//
// # Faults and inspection
//
// SetLimits enforces GitHub's documented REST limits (limits.go): the primary limit per caller (an App
// installation, the App, the PAT) with x-ratelimit-remaining: 0 and x-ratelimit-reset, the secondary
// limit in points per minute (GET 1, writes 5) with retry-after, and concurrent requests; 403 or 429.
// They are off unless set; every REST answer carries the x-ratelimit-* headers. SetOutage answers 503
// to every REST request for a while. Usage counts the requests served and the points they cost.
//
// SetSecondaryRateLimit and SetTooManyRequests make the next n REST requests fail (403 with a
// secondary-rate-limit documentation_url, which go-github surfaces as *github.AbuseRateLimitError, and
// 429). Runners, CancelledRuns, Jobs and Calls let tests observe what the system under test did.
package githubfake
