// Package stack starts the local stack the tests, `make stack`, the demo and the benchmarks run
// against: DynamoDB Local (a child java process, in memory), fauxqs (the SQS emulator, a child node
// process) and, in process, the EC2 Query-API server, the GitHub fake and the OIDC issuer. Everything
// listens on 127.0.0.1 (except DynamoDB Local, see dynamoDBArgs), on free ports unless fixed ones are
// asked for, and Close leaves no child process behind.
//
// `make test` starts one stack with cmd/runnerpool-stack and runs `go test` under its environment;
// FromEnv picks that stack up. Tests use package stacktest, which does either.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
)

// The environment variables a stack is published under (Env) and picked up from (FromEnv). The AWS
// SDK reads the AWS_ENDPOINT_URL_* ones by itself (service-specific endpoints), so code that loads
// the default config talks to the local stack without further wiring.
const (
	EnvDynamoDB   = "AWS_ENDPOINT_URL_DYNAMODB"
	EnvSQS        = "AWS_ENDPOINT_URL_SQS"
	EnvEC2        = "AWS_ENDPOINT_URL_EC2"
	EnvGitHubAPI  = "RUNNERPOOL_GITHUB_API_URL"
	EnvOIDCIssuer = "RUNNERPOOL_OIDC_ISSUER"
	// EnvNodeDir overrides where the npm packages (package.json and node_modules) are found.
	EnvNodeDir = "RUNNERPOOL_STACK_NODE_DIR"
)

// Region is the region of every client and server of the local stack. AccessKeyID and
// SecretAccessKey are the dummy credentials its clients sign with. DynamoDB Local (2.0 and later)
// rejects an access key id that is not only letters and digits with UnrecognizedClientException.
const (
	Region          = "us-east-1"
	AccessKeyID     = "runnerpoollocal"
	SecretAccessKey = "runnerpoollocal"
)

// DefaultReadyTimeout bounds how long Start waits for DynamoDB Local and fauxqs to answer.
const DefaultReadyTimeout = 60 * time.Second

// Options configure Start. The zero value starts everything on free ports.
type Options struct {
	// Runtime is passed to the EC2 server: it is called for every instance the server launches
	// (nil: instances only change state in the server).
	Runtime func(ctx context.Context, inst ec2server.RuntimeInstance)
	// Logger receives the stack's own messages and the in-process servers' logs (nil: discarded).
	Logger *slog.Logger
	// Ports fixes ports; 0 means a free port chosen by the kernel.
	Ports Ports
	// ChildOutput, when set, also receives the stdout and stderr of DynamoDB Local and fauxqs (the
	// last lines are kept in any case and quoted in errors).
	ChildOutput io.Writer
	// NodeDir is the directory holding package.json and node_modules (default: $RUNNERPOOL_STACK_NODE_DIR,
	// else test/stack/node of the repository found by walking up from the working directory).
	NodeDir string
	// Java and Node are the binaries to run (default: "java" and "node" looked up on PATH).
	Java, Node string
	// ReadyTimeout bounds the wait for the emulators to answer (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// EC2PendingDelay is the EC2 server's pending -> running delay (launch and start): 0 keeps the
	// server's default, a negative value means none (see ec2server.Options.PendingDelay).
	EC2PendingDelay time.Duration
	// SQSSampling, when above 0, puts the sampling proxy (Sampler) in front of fauxqs: a short poll
	// comes back empty with this probability, as a real SQS short poll can on a small queue.
	// Endpoints.SQS is then the proxy's. 0 takes $RUNNERPOOL_STACK_SQS_SAMPLING (unset: no proxy);
	// a negative value turns the proxy off whatever the environment says.
	SQSSampling float64
}

// Ports are fixed ports for the stack's servers; 0 means a free port.
type Ports struct {
	DynamoDB, SQS, EC2, GitHubAPI, OIDCIssuer int
}

// Endpoints are the base URLs of the stack's servers, all http://127.0.0.1:PORT.
type Endpoints struct {
	DynamoDB, SQS, EC2, GitHubAPI, OIDCIssuer string
	// S3 is the runner cache's bucket store (s3.go); empty for a stack from FromEnv whose starter set
	// no AWS_ENDPOINT_URL_S3.
	S3 string
}

// Stack is a running local stack, or (FromEnv) the endpoints of one started by another process.
type Stack struct {
	Endpoints Endpoints
	// EC2, GitHub and OIDC are the in-process servers, for hooks such as fault injection. They are
	// nil for a stack from FromEnv: a test that needs them starts its own server with httptest.
	EC2    *ec2server.Server
	GitHub *githubfake.Server
	OIDC   *oidcissuer.Issuer
	// Sampler is the SQS sampling proxy in front of fauxqs, nil when sampling is off (and for a
	// stack from FromEnv).
	Sampler *Sampler

	logger   *slog.Logger
	children []*child
	servers  []*http.Server
	done     chan struct{} // closed when a child exits unexpectedly
	doneOnce sync.Once
	doneErr  error

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{}
}

// Start starts a local stack and returns once DynamoDB Local answers ListTables and fauxqs answers
// ListQueues. ctx bounds the start only; the stack runs until Close. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	began := time.Now()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if err := opts.Ports.checkDistinct(); err != nil {
		return nil, err
	}
	if opts.SQSSampling == 0 {
		if opts.SQSSampling, err = samplingFromEnv(); err != nil {
			return nil, err
		}
	}
	if opts.SQSSampling >= 1 {
		return nil, fmt.Errorf("SQS sampling probability %v is not below 1", opts.SQSSampling)
	}

	// Everything that can be checked without starting anything comes first, so a missing
	// prerequisite fails in milliseconds.
	deps, err := findDeps(opts)
	if err != nil {
		return nil, err
	}

	s := &Stack{logger: logger, done: make(chan struct{}), closing: make(chan struct{})}
	var listeners []net.Listener
	defer func() {
		if err != nil {
			closeAll(listeners...) // those not yet served; closing a served one again is harmless
			_ = s.Close()
		}
	}()

	// The in-process servers keep their listeners from the start: a fixed port that is taken fails
	// here, before any child is started, and nothing can take the port in between.
	ec2Lis, err := listen(opts.Ports.EC2, "the EC2 server")
	if err != nil {
		return nil, err
	}
	listeners = append(listeners, ec2Lis)
	ghLis, err := listen(opts.Ports.GitHubAPI, "the GitHub fake")
	if err != nil {
		return nil, err
	}
	listeners = append(listeners, ghLis)
	oidcLis, err := listen(opts.Ports.OIDCIssuer, "the OIDC issuer")
	if err != nil {
		return nil, err
	}
	listeners = append(listeners, oidcLis)
	// The children bind their ports themselves; a fixed one is probed now for a clear error.
	if opts.Ports.DynamoDB != 0 {
		if err := probePort(opts.Ports.DynamoDB, "DynamoDB Local", true); err != nil {
			return nil, err
		}
	}
	if opts.Ports.SQS != 0 {
		if err := probePort(opts.Ports.SQS, "fauxqs", false); err != nil {
			return nil, err
		}
	}

	// The JVM is the slow part: start both children, then the in-process servers, then wait.
	ddb, err := s.startChild(ctx, opts, dynamoDBSpec(deps, opts.Ports.DynamoDB))
	if err != nil {
		return nil, err
	}
	sqs, err := s.startChild(ctx, opts, fauxqsSpec(deps, opts.Ports.SQS))
	if err != nil {
		return nil, err
	}

	s.Endpoints.EC2 = baseURL(ec2Lis)
	s.EC2 = ec2server.New(ec2server.Options{
		Region:       Region,
		Runtime:      opts.Runtime,
		PendingDelay: opts.EC2PendingDelay,
		Logger:       logger.With("server", "ec2"),
	})
	s.serve(ec2Lis, s.EC2)
	if err := s.startS3(); err != nil {
		return nil, err
	}

	s.Endpoints.GitHubAPI = baseURL(ghLis)
	s.GitHub = githubfake.New(githubfake.Options{Logger: logger.With("server", "github")})
	s.serve(ghLis, s.GitHub)

	s.Endpoints.OIDCIssuer = baseURL(oidcLis)
	s.OIDC, err = oidcissuer.New(s.Endpoints.OIDCIssuer)
	if err != nil {
		return nil, fmt.Errorf("starting the OIDC issuer: %w", err)
	}
	s.serve(oidcLis, s.OIDC)

	if err := s.waitReady(ctx, opts.ReadyTimeout, opts.ChildOutput); err != nil {
		return nil, err
	}
	// After waitReady: a child that lost the race for its free port was moved to another one.
	s.Endpoints.DynamoDB = ddb.url()
	s.Endpoints.SQS = sqs.url()
	if opts.SQSSampling > 0 {
		// The proxy takes the published SQS endpoint; fauxqs stays reachable only through it.
		if s.Sampler, err = NewSampler(s.Endpoints.SQS, opts.SQSSampling, 0); err != nil {
			return nil, err
		}
		samplerLis, err := listen(0, "the SQS sampling proxy")
		if err != nil {
			return nil, err
		}
		s.serve(samplerLis, s.Sampler)
		s.Endpoints.SQS = baseURL(samplerLis)
		logger.Info("stack: SQS short polls sampled", "empty_probability", opts.SQSSampling, "fauxqs", sqs.url())
	}
	for _, c := range s.children {
		go s.watch(c)
	}
	logger.Info("stack: ready", "took", time.Since(began).Round(time.Millisecond),
		"dynamodb", s.Endpoints.DynamoDB, "sqs", s.Endpoints.SQS, "ec2", s.Endpoints.EC2,
		"github", s.Endpoints.GitHubAPI, "oidc", s.Endpoints.OIDCIssuer)
	return s, nil
}

// FromEnv returns the stack published in the environment by another process (`make test` runs
// `go test` under cmd/runnerpool-stack): the five endpoint variables of Env. It returns nil, nil when
// none of them is set, and an error when only some are. The returned stack only holds endpoints and
// makes clients: its EC2, GitHub and OIDC servers are nil (they live in the other process), and
// Close does nothing.
func FromEnv() (*Stack, error) {
	s := &Stack{logger: slog.New(slog.DiscardHandler)}
	type envVar struct {
		name string
		dst  *string
	}
	vars := []envVar{
		{EnvDynamoDB, &s.Endpoints.DynamoDB},
		{EnvSQS, &s.Endpoints.SQS},
		{EnvEC2, &s.Endpoints.EC2},
		{EnvGitHubAPI, &s.Endpoints.GitHubAPI},
		{EnvOIDCIssuer, &s.Endpoints.OIDCIssuer},
	}
	var set, missing []string
	for _, v := range vars {
		val := os.Getenv(v.name)
		if val == "" {
			missing = append(missing, v.name)
			continue
		}
		u, err := url.Parse(val)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s=%q is not an http URL", v.name, val)
		}
		*v.dst = val
		set = append(set, v.name)
	}
	switch {
	case len(set) == 0:
		return nil, nil
	case len(missing) > 0:
		return nil, fmt.Errorf("local stack environment incomplete: %s set but %s missing",
			strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	s.Endpoints.S3 = os.Getenv(EnvS3) // optional: a stack started before it had one has none
	return s, nil
}

// Env returns the stack's environment, one NAME=VALUE per entry: the five endpoint variables, then
// AWS_REGION and the dummy credentials. Add it to a child's environment to point it at the stack.
func (s *Stack) Env() []string {
	return []string{
		EnvDynamoDB + "=" + s.Endpoints.DynamoDB,
		EnvSQS + "=" + s.Endpoints.SQS,
		EnvEC2 + "=" + s.Endpoints.EC2,
		EnvGitHubAPI + "=" + s.Endpoints.GitHubAPI,
		EnvOIDCIssuer + "=" + s.Endpoints.OIDCIssuer,
		EnvS3 + "=" + s.Endpoints.S3,
		"AWS_REGION=" + Region,
		"AWS_ACCESS_KEY_ID=" + AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + SecretAccessKey,
	}
}

// Done is closed when DynamoDB Local or fauxqs exits while the stack is running (not by Close);
// Err then says which and why. It is nil for a stack from FromEnv.
func (s *Stack) Done() <-chan struct{} { return s.done }

// Err reports why Done was closed, or nil.
func (s *Stack) Err() error {
	select {
	case <-s.done:
		return s.doneErr
	default:
		return nil
	}
}

// Close stops the in-process servers and the children (SIGTERM to each process group, SIGKILL after
// a grace period) and waits for them. It is safe to call more than once; on a stack from FromEnv it
// does nothing.
func (s *Stack) Close() error {
	if s.closing == nil { // FromEnv: the stack belongs to another process.
		return nil
	}
	s.closeOnce.Do(func() {
		close(s.closing)
		errs := make([]error, len(s.children))
		var wg sync.WaitGroup
		for i, c := range s.children {
			wg.Go(func() { errs[i] = c.stop(stopGrace) })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range s.servers {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}
		if s.EC2 != nil {
			s.EC2.Close()
		}
		if s.GitHub != nil {
			s.GitHub.Close()
		}
		wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// serve runs h on lis until Close.
func (s *Stack) serve(lis net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("stack: server stopped", "addr", lis.Addr().String(), "err", err)
		}
	}()
}

// watch reports a child that exits before Close.
func (s *Stack) watch(c *child) {
	select {
	case <-s.closing:
	case <-c.exited:
		select {
		case <-s.closing:
			return
		default:
		}
		s.doneOnce.Do(func() {
			s.doneErr = fmt.Errorf("%s exited unexpectedly (%v)%s", c.spec.name, c.waitErr, c.tailSuffix())
			s.logger.Error("stack: child exited", "name", c.spec.name, "err", c.waitErr)
			close(s.done)
		})
	}
}

// checkDistinct rejects the same fixed port given for two servers.
func (p Ports) checkDistinct() error {
	named := []struct {
		name string
		port int
	}{
		{"DynamoDB Local", p.DynamoDB}, {"fauxqs", p.SQS}, {"the EC2 server", p.EC2},
		{"the GitHub fake", p.GitHubAPI}, {"the OIDC issuer", p.OIDCIssuer},
	}
	seen := map[int]string{}
	for _, n := range named {
		if n.port == 0 {
			continue
		}
		if n.port < 0 || n.port > 65535 {
			return fmt.Errorf("port %d for %s is not a valid port", n.port, n.name)
		}
		if other, ok := seen[n.port]; ok {
			return fmt.Errorf("port %d is given for both %s and %s", n.port, other, n.name)
		}
		seen[n.port] = n.name
	}
	return nil
}

// listen listens on 127.0.0.1:port (0: a free port).
func listen(port int, name string) (net.Listener, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if port != 0 && isAddrInUse(err) {
			return nil, fmt.Errorf("port %d for %s is already in use", port, name)
		}
		return nil, fmt.Errorf("listening for %s: %w", name, err)
	}
	return lis, nil
}

// probePort fails clearly when a fixed port for a child is taken. wildcard probes every interface,
// as DynamoDB Local binds there.
func probePort(port int, name string, wildcard bool) error {
	host := "127.0.0.1"
	if wildcard {
		host = ""
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if isAddrInUse(err) {
			return fmt.Errorf("port %d for %s is already in use", port, name)
		}
		return fmt.Errorf("checking port %d for %s: %w", port, name, err)
	}
	return lis.Close()
}

// freePort asks the kernel for a free port. The port is free when this returns, not necessarily
// when the child binds it: startChild retries once or twice when a child loses that race.
func freePort(wildcard bool) (int, error) {
	host := "127.0.0.1"
	if wildcard {
		host = ""
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	return port, lis.Close()
}

func baseURL(lis net.Listener) string {
	return "http://" + lis.Addr().String()
}

func closeAll(ls ...net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}
