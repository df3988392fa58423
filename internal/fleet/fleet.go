// Package fleet launches the instances a provision could not find in the pool: one EC2 CreateFleet
// of type instant per request, attribute-based (vCPU and memory ranges, allowed instance type
// patterns, burstable types excluded unless asked), with one override per subnet so EC2 can use
// every zone's capacity pools. A fleet is all or nothing: when EC2 fills it only partly, every
// instance it did launch is terminated before Create returns, so no instance outlives a failed
// request. It knows nothing of records; the provision orchestrator writes them.
//
// Beyond one call it adds two things: an optional spot -> on-demand fallback, and an
// unavailable-offerings cache (usage class x instance type x zone, with a TTL) fed by the fleet's
// error set, so the next request does not ask EC2 again for a pool it just reported exhausted.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
)

// EC2API is the part of the EC2 client the fleet uses; *ec2.Client satisfies it.
type EC2API interface {
	CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, opts ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error)
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
}

// Usage classes.
const (
	Spot     = "spot"
	OnDemand = "on-demand"
)

const (
	// MaxCount bounds one fleet; a provision asks for at most 50 runners.
	MaxCount = 100
	// maxAllowedTypes is EC2's limit on AllowedInstanceTypes entries per InstanceRequirements.
	maxAllowedTypes = 400
	// terminateBatch is how many ids one TerminateInstances carries (DESIGN: batches of 50).
	terminateBatch = 50
	// cleanupTimeout bounds terminating a partial fleet after the caller's ctx ended.
	cleanupTimeout = 30 * time.Second
)

// LaunchSpec is where and how instances are launched: the runner class's launch template and
// subnets (one per zone for the widest choice of capacity pools) and the tags every instance gets.
type LaunchSpec struct {
	LaunchTemplateID string
	// LaunchTemplateVersion is a version number, "$Default" or "$Latest". Required: CreateFleet,
	// unlike RunInstances, has no default version and fails without one.
	LaunchTemplateVersion string
	Subnets               []string
	// Tags are put on every instance at launch (TagSpecifications), not after: deployment, runner
	// class and run id. They are what makes an instance findable when the process that launched it
	// dies between CreateFleet returning and the records being written. The orphan sweep
	// (refresh) terminates every instance carrying this deployment's tag that has no live record
	// (after a grace period longer than a provision's write of its records), so that crash window
	// leaks nothing.
	Tags map[string]string
}

// Request is one fleet.
type Request struct {
	Count      int
	UsageClass string // Spot or OnDemand
	// InstanceTypes are allowed-instance-types patterns (EC2's AllowedInstanceTypes syntax); empty
	// allows every type.
	InstanceTypes              []string
	MinCPU, MaxCPU             int // vCPUs; a max of 0 means no upper bound
	MinMemoryMiB, MaxMemoryMiB int
	AllowBurstable             bool
	// FallbackToOnDemand: when a spot fleet cannot be filled for capacity reasons, launch the
	// whole count on-demand instead (one more CreateFleet).
	FallbackToOnDemand bool
	// ClientToken, when set, makes the CreateFleet idempotent across retries by the caller (EC2
	// returns the first fleet's answer for the same token). At most 64 ASCII characters.
	ClientToken string
	Spec        LaunchSpec
}

// Validate reports what is wrong with a request.
func (r Request) Validate() error {
	var errs []error
	if r.Count < 1 || r.Count > MaxCount {
		errs = append(errs, fmt.Errorf("count %d: must be between 1 and %d", r.Count, MaxCount))
	}
	if r.UsageClass != Spot && r.UsageClass != OnDemand {
		errs = append(errs, fmt.Errorf("usage class %q: must be %q or %q", r.UsageClass, Spot, OnDemand))
	}
	if len(r.InstanceTypes) > 0 {
		if err := instancetype.ValidatePatterns(r.InstanceTypes); err != nil {
			errs = append(errs, err)
		}
	}
	if r.MinCPU < 0 || r.MaxCPU < 0 || r.MinMemoryMiB < 0 || r.MaxMemoryMiB < 0 {
		errs = append(errs, errors.New("cpu and memory must not be negative"))
	}
	if (r.MaxCPU > 0 && r.MaxCPU < r.MinCPU) || (r.MaxMemoryMiB > 0 && r.MaxMemoryMiB < r.MinMemoryMiB) {
		errs = append(errs, errors.New("a cpu or memory maximum is below its minimum"))
	}
	if r.Spec.LaunchTemplateID == "" {
		errs = append(errs, errors.New("launch template id is required"))
	}
	if err := ValidateTemplateVersion(r.Spec.LaunchTemplateVersion); err != nil {
		errs = append(errs, err)
	}
	if len(r.Spec.Subnets) == 0 {
		errs = append(errs, errors.New("at least one subnet is required"))
	}
	if len(r.ClientToken) > 64 {
		errs = append(errs, errors.New("client token is longer than 64 characters"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid fleet request: %w", err)
	}
	return nil
}

// ValidateTemplateVersion checks a launch template version as CreateFleet takes it: a version
// number, "$Default" or "$Latest", never empty.
func ValidateTemplateVersion(v string) error {
	switch v {
	case "":
		return errors.New("launch template version is required (a version number, $Default or $Latest): CreateFleet fails without one")
	case "$Default", "$Latest":
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 {
		return fmt.Errorf("launch template version %q: want a version number, $Default or $Latest", v)
	}
	return nil
}

// Launched is one instance of a fleet.
type Launched struct {
	ID, InstanceType, Zone, SubnetID, UsageClass string
}

// Options configure a Fleet.
type Options struct {
	// OfferingsTTL is how long an exhausted offering is skipped (default 3 min).
	OfferingsTTL time.Duration
	// CatalogTTL is how long the instance type list is kept (default 1 h).
	CatalogTTL time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

// Fleet launches instant fleets. It is safe for concurrent use.
type Fleet struct {
	api       EC2API
	log       *slog.Logger
	now       func() time.Time
	offerings *offerings
	catalog   *catalog

	mu          sync.Mutex
	subnetZones map[string]string // learned from fleet answers; subnets never change zone
}

// New returns a Fleet.
func New(api EC2API, opts Options) *Fleet {
	if opts.OfferingsTTL <= 0 {
		opts.OfferingsTTL = 3 * time.Minute
	}
	if opts.CatalogTTL <= 0 {
		opts.CatalogTTL = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Fleet{
		api: api, log: opts.Logger, now: opts.Now,
		offerings:   newOfferings(opts.OfferingsTTL, opts.Now),
		catalog:     newCatalog(api, opts.CatalogTTL, opts.Now),
		subnetZones: map[string]string{},
	}
}

// Unavailable lists the offerings currently skipped.
func (f *Fleet) Unavailable() []UnavailableOffering { return f.offerings.list() }

// MarkUnavailable puts an offering in the cache, as a fleet error would. The zone of a subnet is
// learned from fleet answers; SetSubnetZone tells it up front.
func (f *Fleet) MarkUnavailable(o Offering, reason string) { f.offerings.markUnavailable(o, reason) }

// SetSubnetZone records a subnet's zone, so cached offerings apply to the subnet before any fleet
// answer has named its zone.
func (f *Fleet) SetSubnetZone(subnetID, zone string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subnetZones[subnetID] = zone
}

// Create launches req.Count instances with one CreateFleet (two with the on-demand fallback) and
// returns them, or an error. A fleet EC2 fills only partly is terminated and reported as an
// *InsufficientCapacityError; so is a request whose every offering is cached as unavailable.
// Create does not retry on capacity beyond the optional fallback: the provision decides.
func (f *Fleet) Create(ctx context.Context, req Request) ([]Launched, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	launched, err := f.createOnce(ctx, req, req.UsageClass)
	var ice *InsufficientCapacityError
	if err == nil || !errors.As(err, &ice) {
		return launched, err
	}
	if req.UsageClass != Spot || !req.FallbackToOnDemand || len(ice.Unterminated) > 0 || !ice.capacityShortage() {
		return nil, err
	}
	f.log.InfoContext(ctx, "spot fleet not filled, falling back to on-demand", "count", req.Count, "error", err)
	odReq := req
	if odReq.ClientToken != "" {
		odReq.ClientToken = fallbackToken(req.ClientToken)
	}
	launched, err = f.createOnce(ctx, odReq, OnDemand)
	var odICE *InsufficientCapacityError
	if errors.As(err, &odICE) {
		odICE.Fallback = ice
	}
	return launched, err
}

func fallbackToken(t string) string {
	const suffix = "-od"
	if len(t)+len(suffix) > 64 {
		t = t[:64-len(suffix)]
	}
	return t + suffix
}

func (f *Fleet) createOnce(ctx context.Context, req Request, usage string) ([]Launched, error) {
	overrides := f.overrides(ctx, req, usage)
	if len(overrides) == 0 {
		return nil, &InsufficientCapacityError{UsageClass: usage, Requested: req.Count, Skipped: true}
	}
	in := f.input(req, usage, overrides)
	sent := ctx.Err() == nil
	out, err := f.api.CreateFleet(ctx, in)
	if err != nil && sent && req.ClientToken != "" && unknownOutcome(err) {
		return f.reconcileLost(ctx, in, req, usage, err)
	}
	if err != nil {
		// An instant fleet reports capacity per pool in its error set; EC2's refusal of the call
		// itself means nothing was launched.
		if a := RefusedAttribute(err); a != "" {
			return nil, fmt.Errorf("runner class %q: %s refused by EC2: creating %s fleet of %d: %w", req.Spec.Tags[tags.RunnerClass], a, usage, req.Count, err)
		}
		return nil, fmt.Errorf("creating %s fleet of %d: %w", usage, req.Count, err)
	}
	return f.complete(ctx, req, usage, out)
}

// complete judges a fleet's answer: the instances when it is filled; otherwise it terminates them
// and reports an *InsufficientCapacityError. Exhausted offerings go to the cache either way.
func (f *Fleet) complete(ctx context.Context, req Request, usage string, out *ec2.CreateFleetOutput) ([]Launched, error) {
	launched, lerrs := f.read(out, usage)
	for _, le := range lerrs {
		if isOfferingCode(le.Code) && le.InstanceType != "" && le.Zone != "" {
			f.offerings.markUnavailable(Offering{UsageClass: le.UsageClass, InstanceType: le.InstanceType, Zone: le.Zone}, le.Code)
		}
	}
	if len(launched) >= req.Count {
		if len(lerrs) > 0 {
			f.log.DebugContext(ctx, "fleet filled despite exhausted pools", "fleet", aws.ToString(out.FleetId), "errors", len(lerrs))
		}
		return launched, nil
	}
	// Partial (or empty) fulfilment: the request is all or nothing, so everything this fleet
	// launched is terminated now. EC2 has no all-or-nothing mode that spans zones and types for
	// instant fleets (MinTargetCapacity needs SingleAvailabilityZone or SingleInstanceType), hence
	// doing it here.
	ice := &InsufficientCapacityError{UsageClass: usage, Requested: req.Count, Launched: len(launched), Errors: lerrs}
	if len(launched) > 0 {
		ice.Terminated, ice.Unterminated, ice.TerminateErr = f.terminate(ctx, launched)
	}
	f.log.InfoContext(ctx, "fleet not filled", "fleet", aws.ToString(out.FleetId), "error", ice.Error())
	return nil, ice
}

// unknownOutcome reports whether a failed call may still have been applied: its answer never came
// (the caller's deadline passed, the connection dropped, the attempt timed out) or EC2 answered
// with an internal error after the SDK's retries. A refusal (4xx) applied nothing.
func unknownOutcome(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return true
	}
	switch ae.ErrorCode() {
	case "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable":
		return true
	}
	return false
}

// reconcileLost settles a CreateFleet whose outcome is unknown (unknownOutcome): EC2 may have
// launched the fleet all the same, and reporting "nothing launched" would leave its instances to
// the orphan sweep. The request is sent again with the same client token on a context of its own,
// bounded by cleanupTimeout: EC2 answers a token it knows with the first call's fleet, and one it
// does not know by launching it now, so the answer is the fleet, exactly. When the caller is still
// there, that answer is its result; when its context ended, the instances are terminated at once
// and the error says so.
func (f *Fleet) reconcileLost(ctx context.Context, in *ec2.CreateFleetInput, req Request, usage string, cause error) ([]Launched, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	out, err := f.api.CreateFleet(rctx, in)
	if err != nil {
		return nil, fmt.Errorf("creating %s fleet of %d: %w (asking again with its client token: %w)", usage, req.Count, cause, err)
	}
	launched, _ := f.read(out, usage)
	if ctx.Err() == nil {
		f.log.InfoContext(ctx, "fleet answer lost; asked again with its client token", "fleet", aws.ToString(out.FleetId), "launched", len(launched), "cause", cause)
		return f.complete(ctx, req, usage, out)
	}
	done, failed, terr := f.terminate(ctx, launched)
	f.log.WarnContext(ctx, "fleet launched after its caller gave up: terminated", "fleet", aws.ToString(out.FleetId), "terminated", len(done), "unterminated", len(failed))
	if terr != nil {
		return nil, fmt.Errorf("creating %s fleet of %d: %w: launched %d after the caller gave up, terminating them failed: %w", usage, req.Count, cause, len(launched), terr)
	}
	return nil, fmt.Errorf("creating %s fleet of %d: %w: launched %d after the caller gave up, terminated %v", usage, req.Count, cause, len(launched), done)
}

// overrides builds one override per subnet. When the offerings cache holds exhausted types for a
// subnet's zone, that override lists the still-allowed types explicitly instead of the patterns.
//
// Why not ExcludedInstanceTypes: EC2 refuses AllowedInstanceTypes and ExcludedInstanceTypes in the
// same InstanceRequirements, and a request's allowed-instance-types patterns must stay in force; so
// the only way to take a type out of a pattern is to expand the pattern into names (from the
// instance type catalogue, read only when the cache has something to exclude) minus the exhausted
// ones. Exclusion is per zone, so a type exhausted in one zone is still offered in the others; a
// zone with nothing left is omitted, and a request with no zone left is not sent at all.
func (f *Fleet) overrides(ctx context.Context, req Request, usage string) []types.FleetLaunchTemplateOverridesRequest {
	var out []types.FleetLaunchTemplateOverridesRequest
	for _, subnet := range req.Spec.Subnets {
		allowed := slices.Clone(req.InstanceTypes)
		f.mu.Lock()
		zone := f.subnetZones[subnet]
		f.mu.Unlock()
		if zone != "" {
			if exclude := f.offerings.unavailableIn(usage, zone); len(exclude) > 0 {
				names, err := f.catalog.matching(ctx, req, exclude)
				switch {
				case err != nil:
					// Narrowing is an optimisation: without the catalogue, ask for the patterns
					// and let EC2 report the exhausted pools again.
					f.log.WarnContext(ctx, "instance types not listed; exhausted offerings not excluded", "zone", zone, "err", err)
				case len(names) == 0:
					f.log.DebugContext(ctx, "every allowed offering is cached unavailable, skipping subnet",
						"subnet", subnet, "zone", zone, "usage_class", usage)
					continue
				case len(names) <= maxAllowedTypes:
					allowed = names
				default:
					f.log.DebugContext(ctx, "too many allowed types to exclude exhausted offerings", "zone", zone, "types", len(names))
				}
			}
		}
		ir := &types.InstanceRequirementsRequest{
			VCpuCount:            &types.VCpuCountRangeRequest{Min: aws.Int32(int32(req.MinCPU))},
			MemoryMiB:            &types.MemoryMiBRequest{Min: aws.Int32(int32(req.MinMemoryMiB))},
			AllowedInstanceTypes: allowed,
			BurstablePerformance: types.BurstablePerformanceExcluded,
		}
		if req.MaxCPU > 0 {
			ir.VCpuCount.Max = aws.Int32(int32(req.MaxCPU))
		}
		if req.MaxMemoryMiB > 0 {
			ir.MemoryMiB.Max = aws.Int32(int32(req.MaxMemoryMiB))
		}
		if req.AllowBurstable {
			ir.BurstablePerformance = types.BurstablePerformanceIncluded
		}
		out = append(out, types.FleetLaunchTemplateOverridesRequest{SubnetId: aws.String(subnet), InstanceRequirements: ir})
	}
	return out
}

func (f *Fleet) input(req Request, usage string, overrides []types.FleetLaunchTemplateOverridesRequest) *ec2.CreateFleetInput {
	lts := &types.FleetLaunchTemplateSpecificationRequest{
		LaunchTemplateId: aws.String(req.Spec.LaunchTemplateID), Version: aws.String(req.Spec.LaunchTemplateVersion),
	}
	target := &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(int32(req.Count))}
	in := &ec2.CreateFleetInput{
		Type:                        types.FleetTypeInstant,
		LaunchTemplateConfigs:       []types.FleetLaunchTemplateConfigRequest{{LaunchTemplateSpecification: lts, Overrides: overrides}},
		TargetCapacitySpecification: target,
	}
	if usage == Spot {
		target.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeSpot
		target.SpotTargetCapacity = aws.Int32(int32(req.Count))
		// price-capacity-optimized: AWS's recommended strategy, pools with the most spare
		// capacity at a low price, so fewer interruptions.
		in.SpotOptions = &types.SpotOptionsRequest{AllocationStrategy: types.SpotAllocationStrategyPriceCapacityOptimized}
	} else {
		target.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeOnDemand
		target.OnDemandTargetCapacity = aws.Int32(int32(req.Count))
		in.OnDemandOptions = &types.OnDemandOptionsRequest{AllocationStrategy: types.FleetOnDemandAllocationStrategyLowestPrice}
	}
	if len(req.Spec.Tags) > 0 {
		var tags []types.Tag
		for _, k := range slices.Sorted(maps.Keys(req.Spec.Tags)) {
			tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(req.Spec.Tags[k])})
		}
		in.TagSpecifications = []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeFleet, Tags: tags},
		}
	}
	if req.ClientToken != "" {
		in.ClientToken = aws.String(req.ClientToken)
	}
	return in
}

// read turns a CreateFleet answer into launched instances and launch errors, learning subnet zones
// on the way.
func (f *Fleet) read(out *ec2.CreateFleetOutput, usage string) ([]Launched, []LaunchError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	overrides := func(lo *types.LaunchTemplateAndOverridesResponse) (itype, zone, subnet string) {
		if lo == nil || lo.Overrides == nil {
			return "", "", ""
		}
		o := lo.Overrides
		itype, zone, subnet = string(o.InstanceType), aws.ToString(o.AvailabilityZone), aws.ToString(o.SubnetId)
		if subnet != "" && zone != "" {
			f.subnetZones[subnet] = zone
		}
		if zone == "" && subnet != "" {
			zone = f.subnetZones[subnet]
		}
		return itype, zone, subnet
	}
	lifecycle := func(l types.InstanceLifecycle) string {
		if l == types.InstanceLifecycleSpot {
			return Spot
		}
		if l == "" {
			return usage
		}
		return OnDemand
	}
	var launched []Launched
	for _, fi := range out.Instances {
		itype, zone, subnet := overrides(fi.LaunchTemplateAndOverrides)
		if fi.InstanceType != "" {
			itype = string(fi.InstanceType)
		}
		if z := aws.ToString(fi.AvailabilityZone); z != "" {
			zone = z
		}
		for _, id := range fi.InstanceIds {
			launched = append(launched, Launched{ID: id, InstanceType: itype, Zone: zone, SubnetID: subnet, UsageClass: lifecycle(fi.Lifecycle)})
		}
	}
	var lerrs []LaunchError
	for _, fe := range out.Errors {
		itype, zone, subnet := overrides(fe.LaunchTemplateAndOverrides)
		lerrs = append(lerrs, LaunchError{
			Code: aws.ToString(fe.ErrorCode), Message: aws.ToString(fe.ErrorMessage), UsageClass: lifecycle(fe.Lifecycle),
			InstanceType: itype, Zone: zone, SubnetID: subnet,
		})
	}
	return launched, lerrs
}

// terminate terminates instances in batches. It keeps going after the caller's ctx ended (a
// cancelled provision must still not leave instances behind), bounded by cleanupTimeout. The
// instances were launched moments ago, so an id EC2 answers unknown is eventual consistency, not
// proof it is gone: it is reported unterminated (the orphan sweep finds it by its tags).
func (f *Fleet) terminate(ctx context.Context, launched []Launched) (done []string, failed []Launched, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	ids := make([]string, len(launched))
	for i, l := range launched {
		ids[i] = l.ID
	}
	res := terminate.Batches(ctx, f.api, ids, terminateBatch)
	errs := res.Errs
	if len(res.Gone) > 0 {
		errs = append(errs, fmt.Errorf("terminating %s: EC2 does not know them yet", strings.Join(res.Gone, ", ")))
	}
	for _, l := range launched {
		if !slices.Contains(res.Done, l.ID) {
			failed = append(failed, l)
		}
	}
	return res.Done, failed, errors.Join(errs...)
}
