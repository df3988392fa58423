// Package ec2server is an in-memory EC2 Query-API server: the test double that integration
// tests, the demo and the benchmarks drive with the real aws-sdk-go-v2 ec2 client (no EC2
// emulator can be installed on our machines).
//
// It implements the calls runnerpool makes (CreateFleet, RunInstances, DescribeInstances,
// Start/Stop/TerminateInstances, CreateTags/DeleteTags, launch templates, DescribeInstanceTypes)
// with EC2's parameter names, XML shapes, error codes and instance state machine. Instances move
// through their transitional states on a clock (Options.Now), evaluated on every request and by
// a background ticker. An optional Runtime hook runs "the inside" of each running instance, with
// its own IMDSv2 endpoint. Fault hooks (throttling, capacity, latency, scripted failures) let
// tests exercise the unhappy paths.
//
// server.go: options, the Server, the HTTP entry point (parsing, faults, dispatch, recovery),
// the clock-driven state machine and the test-facing hooks.
package ec2server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	accountID = "123456789012"
	// defaultMaxLiveInstances bounds the model (EC2's account limit plays this role): launches
	// beyond it fail with InstanceLimitExceeded, so no request can make the server allocate
	// unboundedly.
	defaultMaxLiveInstances = 5000
	maxBodyBytes            = 1 << 20
	// closeWait bounds how long Close waits for runtimes to return after cancelling them
	// (ExecRuntime needs up to 5 s to escalate SIGTERM to SIGKILL).
	closeWait = 15 * time.Second
)

// Options configures a Server. Zero values take the documented defaults; a negative delay
// means "no delay" (the transition completes on the next read).
type Options struct {
	Region string           // default "us-east-1"
	Now    func() time.Time // injected clock, default time.Now

	PendingDelay      time.Duration // pending -> running (launch and start), default 300ms
	StoppingDelay     time.Duration // stopping -> stopped, default 300ms
	ShuttingDownDelay time.Duration // shutting-down -> terminated, default 300ms
	// TerminatedRetention is how long terminated instances stay visible, default 1 min.
	TerminatedRetention time.Duration

	// Runtime, when set, is called in its own goroutine each time an instance enters running
	// (launch and every start). Its ctx is cancelled when the instance leaves running
	// (stop, terminate) or on Close. While a Runtime is set, each instance gets its own IMDSv2
	// endpoint (RuntimeInstance.IMDSEndpoint).
	Runtime func(ctx context.Context, inst RuntimeInstance)
	Logger  *slog.Logger // default: discard
	// MaxLiveInstances is the account's instance limit (default 5000): launches beyond it fail
	// with InstanceLimitExceeded.
	MaxLiveInstances int
	// ConsistencyDelay models EC2's eventual consistency (consistency.go): for this long after its
	// launch (by the clock Now), an instance is absent from DescribeInstances listings and every
	// call naming its id answers InvalidInstanceID.NotFound. Default 0: visible at once.
	ConsistencyDelay time.Duration
}

// RuntimeInstance is what a Runtime knows about the instance it runs.
type RuntimeInstance struct {
	ID, InstanceType, AvailabilityZone, ImageID string
	Tags                                        map[string]string
	IMDSEndpoint                                string // e.g. http://127.0.0.1:PORT
	UserData                                    string // decoded
}

// InstanceView is a read-only snapshot of one instance, for tests.
type InstanceView struct {
	ID, ImageID, InstanceType, AvailabilityZone, SubnetID, PrivateIP string
	State                                                            string    // pending, running, shutting-down, terminated, stopping, stopped
	Lifecycle                                                        string    // "spot" or "on-demand"
	LaunchTime                                                       time.Time // latest launch or start, as EC2 reports it
	Tags                                                             map[string]string
	UserData                                                         string   // decoded
	FleetID                                                          string   // set when launched by CreateFleet
	LaunchTemplateID                                                 string   // set when launched from a launch template
	IMDSEndpoint                                                     string   // set while the instance has an IMDS listener
	SecurityGroups                                                   []string // security group ids
	IamInstanceProfile                                               string   // name or ARN, as launched
	Volumes                                                          []VolumeView
	SpotInstanceAction                                               string // spot/instance-action once an interruption is announced (InterruptSpot)
}

// Server is the EC2 double. It implements http.Handler; mount it on an httptest.Server (or
// any listener) and point the SDK's BaseEndpoint at it.
type Server struct {
	opts Options
	log  *slog.Logger

	baseCtx    context.Context // parent of every runtime ctx; cancelled by Close
	baseCancel context.CancelFunc
	stop       chan struct{}
	wg         sync.WaitGroup // ticker, runtimes, IMDS listeners

	mu            sync.Mutex
	closed        bool
	instances     map[string]*instance
	imdsHosts     map[string]*instance // IMDS endpoint -> its instance (nil once closed): IMDSTransport
	seq           uint64               // launch order, for stable listings and page tokens
	ipSeq         uint32
	templates     map[string]*launchTemplate // by id
	templateNames map[string]string          // name -> id
	templateSeq   uint64
	subnets       map[string]string            // subnet id -> zone (SetSubnet)
	images        map[string]string            // image id -> architecture (SetImage)
	rootDevices   map[string]string            // image id -> root device name (SetRootDevice)
	imageTags     map[string]map[string]string // image id -> its tags (SetImageTags)
	missing       map[string]bool              // ids of images, security groups, profiles EC2 does not know (SetMissing)
	capacity      map[capacityKey]int
	throttle      float64
	throttleUntil time.Time // SetThrottleMutating: every mutating call is refused until then
	throttleDebt  float64
	throttled     int // calls refused with RequestLimitExceeded (Throttled)
	latency       time.Duration
	faults        map[string][]*apiError
	calls         map[string]int
	idempotent    map[string]idempotentCall // action + ClientToken -> the call and its answer
}

type handler func(s *Server, p *params) (response, *apiError)

// handlers lists the supported actions. Every handler runs with s.mu held.
var handlers = map[string]handler{
	"CreateFleet":                    (*Server).createFleet,
	"RunInstances":                   (*Server).runInstances,
	"DescribeInstances":              (*Server).describeInstances,
	"DescribeTags":                   (*Server).describeTags,
	"StartInstances":                 (*Server).startInstances,
	"StopInstances":                  (*Server).stopInstances,
	"TerminateInstances":             (*Server).terminateInstances,
	"CreateTags":                     (*Server).createTags,
	"DeleteTags":                     (*Server).deleteTags,
	"CreateLaunchTemplate":           (*Server).createLaunchTemplate,
	"CreateLaunchTemplateVersion":    (*Server).createLaunchTemplateVersion,
	"DescribeLaunchTemplates":        (*Server).describeLaunchTemplates,
	"DescribeLaunchTemplateVersions": (*Server).describeLaunchTemplateVersions,
	"ModifyLaunchTemplate":           (*Server).modifyLaunchTemplate,
	"DeleteLaunchTemplate":           (*Server).deleteLaunchTemplate,
	"DescribeInstanceTypes":          (*Server).describeInstanceTypes,
	"DescribeImages":                 (*Server).describeImages,
	"DescribeVolumes":                (*Server).describeVolumes,
	"DescribeInstanceAttribute":      (*Server).describeInstanceAttribute,
	"DeleteLaunchTemplateVersions":   (*Server).deleteLaunchTemplateVersions,
	"DescribeSpotPriceHistory":       (*Server).describeSpotPriceHistory,
}

// idempotentActions replay their first answer when called again with the same ClientToken,
// as EC2 does: the SDK sends one token per logical call and reuses it on retries.
var idempotentActions = map[string]bool{
	"CreateFleet": true, "RunInstances": true, "CreateLaunchTemplate": true, "CreateLaunchTemplateVersion": true,
}

// New returns a running Server; call Close when done.
func New(opts Options) *Server {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&opts.PendingDelay, 300*time.Millisecond)
	def(&opts.StoppingDelay, 300*time.Millisecond)
	def(&opts.ShuttingDownDelay, 300*time.Millisecond)
	def(&opts.TerminatedRetention, time.Minute)
	if opts.MaxLiveInstances <= 0 {
		opts.MaxLiveInstances = defaultMaxLiveInstances
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:          opts,
		log:           opts.Logger,
		stop:          make(chan struct{}),
		instances:     map[string]*instance{},
		templates:     map[string]*launchTemplate{},
		templateNames: map[string]string{},
		subnets:       map[string]string{},
		images:        map[string]string{},
		rootDevices:   map[string]string{},
		imageTags:     map[string]map[string]string{},
		missing:       map[string]bool{},
		capacity:      map[capacityKey]int{},
		faults:        map[string][]*apiError{},
		calls:         map[string]int{},
		idempotent:    map[string]idempotentCall{},
	}
	s.baseCtx, s.baseCancel = context.WithCancel(context.WithValue(context.Background(), loggerKey{}, opts.Logger))
	s.wg.Add(1)
	go s.tick(tickInterval(opts))
	return s
}

// tickInterval is a quarter of the shortest delay, within [5ms, 100ms]: frequent enough that
// runtimes start promptly when nobody reads, cheap enough to be free.
func tickInterval(o Options) time.Duration {
	d := min(o.PendingDelay, o.StoppingDelay, o.ShuttingDownDelay) / 4
	return min(max(d, 5*time.Millisecond), 100*time.Millisecond)
}

func (s *Server) tick(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			s.advanceLocked(s.opts.Now())
			s.mu.Unlock()
		}
	}
}

// Close stops the ticker, cancels every runtime, closes the IMDS listeners and waits (bounded)
// for runtimes to return. It is idempotent. The handler keeps answering API calls afterwards,
// but no runtime starts any more.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	s.baseCancel()
	for _, in := range s.instances {
		s.stopRuntimeLocked(in)
		s.closeIMDSLocked(in)
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
		s.log.Warn("ec2server: runtimes still running after close", "waited", closeWait)
	}
}

// ServeHTTP answers one EC2 Query-API call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("ec2server: handler panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			writeError(w, requestID, &apiError{Status: http.StatusInternalServerError, Code: "InternalError",
				Message: "An internal error has occurred."})
		}
	}()
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		writeError(w, requestID, &apiError{Status: http.StatusBadRequest, Code: "UnsupportedHttpVerb",
			Message: "The HTTP verb " + r.Method + " is not supported."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, requestID, &apiError{Status: http.StatusBadRequest, Code: "MalformedQueryString",
			Message: "The query string is malformed: " + err.Error()})
		return
	}
	action := r.Form.Get("Action")
	if action == "" {
		writeError(w, requestID, &apiError{Status: http.StatusBadRequest, Code: "MissingAction",
			Message: "The request must contain the parameter Action."})
		return
	}
	h, ok := handlers[action]
	if !ok {
		writeError(w, requestID, &apiError{Status: http.StatusBadRequest, Code: "InvalidAction",
			Message: fmt.Sprintf("The action %s is not valid for this web service.", action)})
		return
	}
	if v := r.Form.Get("Version"); v != "" && v != apiVersion {
		writeError(w, requestID, &apiError{Status: http.StatusBadRequest, Code: "InvalidParameterValue",
			Message: fmt.Sprintf("This server implements EC2 API version %s, not %s.", apiVersion, v)})
		return
	}

	s.mu.Lock()
	s.calls[action]++
	latency := s.latency
	var fault *apiError
	if q := s.faults[action]; len(q) > 0 {
		fault, s.faults[action] = q[0], q[1:]
	}
	// Throttling is spread evenly rather than drawn at random, so that a run's API-call counts
	// are reproducible: at 0.5 every second call is refused.
	throttled := mutating(action) && s.opts.Now().Before(s.throttleUntil)
	if s.throttle > 0 && !throttled {
		s.throttleDebt += s.throttle
		if s.throttleDebt >= 1 {
			s.throttleDebt--
			throttled = true
		}
	}
	if throttled {
		s.throttled++
	}
	s.mu.Unlock()

	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if fault != nil {
		writeError(w, requestID, fault)
		return
	}
	if throttled {
		writeError(w, requestID, &apiError{Status: http.StatusServiceUnavailable, Code: "RequestLimitExceeded",
			Message: "Request limit exceeded."})
		return
	}

	p := newParams(r.Form)
	var cacheKey, fingerprint string
	if tok := p.str("ClientToken"); tok != "" && idempotentActions[action] {
		cacheKey = action + "\x00" + tok
		fingerprint = callFingerprint(r.Form)
	}
	body, aerr := s.invoke(action, h, p, requestID, cacheKey, fingerprint)
	if aerr != nil {
		s.log.Debug("ec2server: call failed", "action", action, "code", aerr.Code, "message", aerr.Message)
		writeError(w, requestID, aerr)
		return
	}
	writeXML(w, http.StatusOK, body)
}

// invoke runs one handler under the lock and marshals its answer. A panicking handler
// becomes an InternalError and, thanks to the deferred unlock, does not wedge the server.
// idempotentCall is a call made with a client token: its parameters (callFingerprint) and its answer.
type idempotentCall struct {
	fingerprint string
	body        []byte
}

// callFingerprint is a call's parameters without its client token, in a canonical order.
func callFingerprint(form url.Values) string {
	f := maps.Clone(form)
	delete(f, "ClientToken")
	return f.Encode()
}

// invoke runs a handler. A call with a client token (cacheKey) seen before is answered as the first
// was, as EC2 does, when its parameters (fingerprint) are the same; with other parameters it is
// refused with IdempotentParameterMismatch, as EC2 does.
func (s *Server) invoke(action string, h handler, p *params, requestID, cacheKey, fingerprint string) (body []byte, aerr *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("ec2server: handler panic", "action", action, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			body, aerr = nil, &apiError{Status: http.StatusInternalServerError, Code: "InternalError", Message: "An internal error has occurred."}
		}
	}()
	if cached, ok := s.idempotent[cacheKey]; ok && cacheKey != "" {
		if cached.fingerprint != fingerprint {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "IdempotentParameterMismatch",
				Message: "The client token you have provided is associated with a resource that is already deleted or has different parameters. Please use a different client token."}
		}
		return cached.body, nil
	}
	s.advanceLocked(s.opts.Now())
	resp, aerr := h(s, p)
	if aerr != nil {
		return nil, aerr
	}
	resp.setRequestID(requestID)
	body, err := xml.Marshal(resp)
	if err != nil {
		return nil, &apiError{Status: http.StatusInternalServerError, Code: "InternalError", Message: "marshalling response: " + err.Error()}
	}
	if cacheKey != "" {
		if len(s.idempotent) > 10000 {
			clear(s.idempotent)
		}
		s.idempotent[cacheKey] = idempotentCall{fingerprint: fingerprint, body: body}
	}
	return body, nil
}

// ---- fault and test hooks ----

// SetThrottle makes that fraction (0..1) of calls fail with RequestLimitExceeded (HTTP 503),
// which the SDK's standard retryer retries. The refusals are spread evenly over the calls
// (deterministic), not drawn at random.
func (s *Server) SetThrottle(fraction float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = min(max(fraction, 0), 1)
	s.throttleDebt = 0
}

// SetThrottleMutating refuses every mutating call (every action but Describe* and Get*) with
// RequestLimitExceeded for d from now, as EC2 does when an account's mutating-action bucket is
// empty; reads still pass. d <= 0 ends it.
func (s *Server) SetThrottleMutating(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleUntil = time.Time{}
	if d > 0 {
		s.throttleUntil = s.opts.Now().Add(d)
	}
}

// mutating reports whether an action changes something (EC2's mutating-action rate bucket).
func mutating(action string) bool {
	return !strings.HasPrefix(action, "Describe") && !strings.HasPrefix(action, "Get")
}

// SetCapacity allows at most n more instances of instanceType in zone to be launched or
// started (n < 0: unlimited, the default). An empty instanceType or zone matches any; when
// several limits match a launch, each is consumed.
func (s *Server) SetCapacity(instanceType, zone string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := capacityKey{instanceType, zone}
	if n < 0 {
		delete(s.capacity, k)
		return
	}
	s.capacity[k] = n
}

// SetLatency delays every call by d.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// SetFailNext makes the next call of action fail with code (status 0 means 400). Calls queue:
// two SetFailNext for one action fail its next two calls.
func (s *Server) SetFailNext(action, code string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		status = http.StatusBadRequest
	}
	s.faults[action] = append(s.faults[action], &apiError{Status: status, Code: code,
		Message: "Injected failure (" + code + ")."})
}

// SetSubnet pins a subnet to a zone. Unpinned subnets get region+"a"/"b"/"c" by hash.
func (s *Server) SetSubnet(subnetID, zone string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subnets[subnetID] = zone
}

// SetImage declares an image's architecture ("x86_64" or "arm64"). Launching a declared image
// on a type of the other architecture fails as in EC2. Undeclared images are arm64 when their
// id contains "arm64" or "aarch64", else x86_64, but only attribute-based selection uses that
// guess; explicit instance types are not checked against undeclared images.
func (s *Server) SetImage(imageID, architecture string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[imageID] = architecture
}

// Calls returns the number of calls per action since New or ResetCalls, throttled and failed
// ones included (so SDK retries show).
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Throttled is how many calls were refused with RequestLimitExceeded (SetThrottle,
// SetThrottleMutating) since the server started.
func (s *Server) Throttled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled
}

// ResetCalls zeroes the call counts.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
}

// Instance returns a snapshot of one instance (terminated ones while retained).
func (s *Server) Instance(id string) (InstanceView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.opts.Now())
	in, ok := s.instances[id]
	if !ok {
		return InstanceView{}, false
	}
	return in.view(), true
}

// Instances returns snapshots of all instances in launch order.
func (s *Server) Instances() []InstanceView {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.opts.Now())
	out := make([]InstanceView, 0, len(s.instances))
	for _, in := range s.sortedInstancesLocked() {
		out = append(out, in.view())
	}
	return out
}

func (s *Server) sortedInstancesLocked() []*instance {
	out := make([]*instance, 0, len(s.instances))
	for _, in := range s.instances {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *instance) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return out
}

// ---- capacity ----

type capacityKey struct{ instanceType, zone string }

// capacityLeftLocked returns how many more instances of the type fit in the zone (-1: no limit).
func capacityLeft(caps map[capacityKey]int, instanceType, zone string) int {
	left := -1
	for _, k := range [...]capacityKey{{instanceType, zone}, {instanceType, ""}, {"", zone}, {"", ""}} {
		if n, ok := caps[k]; ok && (left < 0 || n < left) {
			left = n
		}
	}
	return left
}

func consumeCapacity(caps map[capacityKey]int, instanceType, zone string, n int) {
	for _, k := range [...]capacityKey{{instanceType, zone}, {instanceType, ""}, {"", zone}, {"", ""}} {
		if v, ok := caps[k]; ok {
			caps[k] = max(v-n, 0)
		}
	}
}

// zoneForSubnet returns the subnet's zone: pinned by SetSubnet, else one of the region's
// first three zones chosen by a hash of the id (stable across runs).
func (s *Server) zoneForSubnet(subnetID string) string {
	if z, ok := s.subnets[subnetID]; ok {
		return z
	}
	var h uint32 = 2166136261 // FNV-1a
	for i := 0; i < len(subnetID); i++ {
		h = (h ^ uint32(subnetID[i])) * 16777619
	}
	return s.opts.Region + string(rune('a'+h%3))
}

func (s *Server) imageArch(imageID string) (arch string, declared bool) {
	if a, ok := s.images[imageID]; ok {
		return a, true
	}
	if containsAny(imageID, "arm64", "aarch64") {
		return "arm64", false
	}
	return "x86_64", false
}

// ---- ids ----

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func newRequestID() string {
	h := randomHex(32)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

type loggerKey struct{}

// loggerFrom returns the logger the server put in a runtime's ctx, or slog.Default().
func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}
