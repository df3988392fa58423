// fleet.go: CreateFleet of type instant. The request's launch template configs and overrides
// (explicit instance types or attribute-based InstanceRequirements) expand into capacity pools
// (instance type x subnet/zone); on-demand and spot targets are filled from the pools in order,
// spread across the subnets of each instance type, honouring SetCapacity. As in EC2, partial
// fulfilment is a success: the launched instances come back in fleetInstanceSet and every pool
// that ran out in errorSet (InsufficientInstanceCapacity).
package ec2server

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxFleetTarget bounds TotalTargetCapacity (EC2 has a similar per-fleet limit).
const maxFleetTarget = 10000

type fleetPool struct {
	lt           *launchTemplate
	ver          *ltVersion
	versionLabel string
	info         *instanceTypeInfo
	subnetID     string
	zone         string
	zoneGiven    bool
	imageID      string
	imageGiven   bool
	weight       float64 // 0: not given
	priority     float64
	hasPriority  bool
	data         ltData // the version's launch data with the override's ImageId, block devices and profile
	rootDevice   string
	devices      []blockDevice
}

// fleetOverrideFields are the members of FleetLaunchTemplateOverridesRequest. EC2 refuses any
// other: security groups and user data, in particular, come from the launch template only.
var fleetOverrideFields = map[string]bool{
	"AvailabilityZone": true, "AvailabilityZoneId": true, "BlockDeviceMapping": true, "IamInstanceProfile": true,
	"ImageId": true, "InstanceRequirements": true, "InstanceType": true, "KeyName": true, "MaxPrice": true,
	"MetadataOptions": true, "Placement": true, "Priority": true, "SubnetId": true, "WeightedCapacity": true,
}

// checkOverrideFields refuses parameters under an override that FleetLaunchTemplateOverridesRequest
// does not have.
func (p *params) checkOverrideFields(prefix string) *apiError {
	for _, k := range p.under(prefix) {
		field, _, _ := strings.Cut(k[len(prefix):], ".")
		if !fleetOverrideFields[field] {
			return &apiError{Status: 400, Code: "UnknownParameter", Message: "The parameter " + field + " is not recognized in " + strings.TrimSuffix(prefix, ".") + "."}
		}
	}
	return nil
}

// overrideData applies an override's ImageId, block device mappings and instance profile to the
// version's launch data (an override's mappings replace the version's, device by device).
func (p *params) overrideData(op string, ver ltData) ltData {
	d := ver.merge(ltData{})
	if p.has(op + "ImageId") {
		d.imageID = p.str(op + "ImageId")
	}
	if p.hasPrefix(op + "BlockDeviceMapping") {
		d.blockDevices = mergeDevices(d.blockDevices, p.blockDevices(op))
	}
	if p.hasPrefix(op + "IamInstanceProfile") {
		d.iamArn, d.iamName = p.str(op+"IamInstanceProfile.Arn"), p.str(op+"IamInstanceProfile.Name")
	}
	return d
}

func (fp *fleetPool) overridesXML() launchTemplateAndOverridesXML {
	x := launchTemplateAndOverridesXML{
		LaunchTemplateSpecification: fleetLaunchTemplateSpecXML{LaunchTemplateID: fp.lt.id, LaunchTemplateName: fp.lt.name, Version: fp.versionLabel},
		Overrides:                   fleetOverridesXML{InstanceType: fp.info.Name, SubnetID: fp.subnetID, AvailabilityZone: fp.zone},
	}
	if fp.imageGiven {
		x.Overrides.ImageID = fp.imageID
	}
	if fp.weight > 0 {
		x.Overrides.WeightedCapacity = strconv.FormatFloat(fp.weight, 'f', -1, 64)
	}
	if fp.hasPriority {
		x.Overrides.Priority = strconv.FormatFloat(fp.priority, 'f', -1, 64)
	}
	return x
}

// units is how much of the target one instance from the pool provides.
func (fp *fleetPool) units(unitType string) float64 {
	switch unitType {
	case "vcpu":
		return float64(fp.info.VCPUs)
	case "memory-mib":
		return float64(fp.info.MemoryMiB)
	}
	if fp.weight > 0 {
		return fp.weight
	}
	return 1
}

// fleetPoolsLocked expands LaunchTemplateConfigs.N (and their Overrides.M) into pools, in
// request order; attribute-based overrides expand cheapest type first.
func (s *Server) fleetPoolsLocked(p *params) ([]*fleetPool, *apiError) {
	cfgs := p.indices("LaunchTemplateConfigs")
	if len(cfgs) == 0 {
		return nil, missingParameter("LaunchTemplateConfigs")
	}
	var pools []*fleetPool
	for _, c := range cfgs {
		sp := c + ".LaunchTemplateSpecification."
		lt, err := s.findTemplateLocked(p.str(sp+"LaunchTemplateId"), p.str(sp+"LaunchTemplateName"))
		if err != nil {
			return nil, err
		}
		// Unlike RunInstances, CreateFleet has no default version: "You must specify a value,
		// otherwise the request fails" (FleetLaunchTemplateSpecificationRequest).
		label := p.str(sp + "Version")
		if label == "" {
			return nil, missingParameter(sp + "Version")
		}
		ver, err := lt.version(label)
		if err != nil {
			return nil, err
		}
		overrides := p.indices(c + ".Overrides")
		if len(overrides) == 0 {
			overrides = []string{""} // the template alone
		}
		for _, o := range overrides {
			op := o + "."
			if o == "" {
				op = "\x00" // matches no parameter
			}
			if o != "" {
				if err := p.checkOverrideFields(op); err != nil {
					return nil, err
				}
			}
			data := p.overrideData(op, ver.data)
			instanceType := p.str(op + "InstanceType")
			req := p.requirements(op + "InstanceRequirements")
			subnet := p.str(op + "SubnetId")
			zone := p.str(op + "AvailabilityZone")
			image, imageGiven := p.str(op+"ImageId"), p.has(op+"ImageId")
			weight := p.number(op+"WeightedCapacity", 0)
			priority, hasPriority := p.number(op+"Priority", 0), p.has(op+"Priority")
			if p.err != nil {
				return nil, p.err
			}
			if instanceType != "" && req != nil {
				return nil, invalidCombination("InstanceType and InstanceRequirements cannot both be specified in an override.")
			}
			if weight < 0 {
				return nil, invalidValue("WeightedCapacity must be positive.")
			}
			if !imageGiven {
				image = ver.data.imageID
			}
			if image == "" {
				return nil, missingParameter("ImageId (in the launch template or the override)")
			}
			if err := s.checkLaunchResourcesLocked(image, data.securityGroupIDs, data.iamProfile()); err != nil {
				return nil, err
			}
			rootDevice, devices, aerr := s.resolveDevicesLocked(image, data.blockDevices)
			if aerr != nil {
				return nil, aerr
			}
			var types []*instanceTypeInfo
			if req != nil {
				arch, _ := s.imageArch(image)
				types = selectTypes(req, arch)
			} else {
				if instanceType == "" {
					instanceType = ver.data.instanceType
				}
				if instanceType == "" {
					return nil, missingParameter("InstanceType (in the launch template or the override)")
				}
				if err := s.checkTypeAndImageLocked(instanceType, image); err != nil {
					return nil, err
				}
				types = []*instanceTypeInfo{catalogByName[instanceType]}
			}
			zoneGiven := zone != ""
			if subnet != "" {
				zone = s.zoneForSubnet(subnet)
			}
			if zone == "" {
				zone = s.opts.Region + "a"
			}
			for _, t := range types {
				pools = append(pools, &fleetPool{lt: lt, ver: ver, versionLabel: label, info: t, subnetID: subnet,
					zone: zone, zoneGiven: zoneGiven, imageID: image, imageGiven: imageGiven, weight: weight,
					priority: priority, hasPriority: hasPriority, data: data, rootDevice: rootDevice, devices: devices})
			}
		}
	}
	if len(pools) == 0 {
		return nil, invalidValue("No instance type in this server's catalogue matches the InstanceRequirements of the request.")
	}
	return pools, nil
}

type fleetLaunch struct {
	pool      *fleetPool
	lifecycle string
}

type fleetFill struct {
	maxLive  int                 // Options.MaxLiveInstances
	caps     map[capacityKey]int // working copy, committed only if the fleet launches
	live     int
	launches []fleetLaunch
	errors   []fleetErrorXML
	reported map[fleetLaunch]bool
	limitHit bool
}

// fill plans launches of one lifecycle up to target units. Pools are taken in order, grouped by
// instance type; within a type, instances go round-robin across its subnets (EC2 spreads an
// instant fleet across the subnets it is given). A pool with no capacity left gets one
// InsufficientInstanceCapacity error per lifecycle, and the next type is tried.
func (f *fleetFill) fill(pools []*fleetPool, lifecycle string, target float64, unitType string) float64 {
	var groups [][]*fleetPool
	index := map[string]int{}
	for _, fp := range pools {
		i, ok := index[fp.info.Name]
		if !ok {
			i = len(groups)
			index[fp.info.Name] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], fp)
	}
	got := 0.0
	for _, group := range groups {
		for got < target && !f.limitHit {
			progressed := false
			for _, fp := range group {
				if got >= target {
					break
				}
				if capacityLeft(f.caps, fp.info.Name, fp.zone) == 0 {
					f.report(fp, lifecycle, "InsufficientInstanceCapacity", iceMessage(fp.info.Name, fp.zone))
					continue
				}
				if f.live >= f.maxLive {
					f.limitHit = true
					f.report(fp, lifecycle, "InstanceLimitExceeded", "You have requested more instances than your current instance limit of "+strconv.Itoa(f.maxLive)+" allows.")
					break
				}
				consumeCapacity(f.caps, fp.info.Name, fp.zone, 1)
				f.live++
				f.launches = append(f.launches, fleetLaunch{fp, lifecycle})
				got += fp.units(unitType)
				progressed = true
			}
			if !progressed {
				break
			}
		}
	}
	return got
}

func (f *fleetFill) report(fp *fleetPool, lifecycle, code, msg string) {
	k := fleetLaunch{fp, lifecycle}
	if f.reported[k] {
		return
	}
	f.reported[k] = true
	f.errors = append(f.errors, fleetErrorXML{LaunchTemplateAndOverrides: fp.overridesXML(), Lifecycle: lifecycle, ErrorCode: code, ErrorMessage: msg})
}

func (s *Server) createFleet(p *params) (response, *apiError) {
	if t := p.str("Type"); t != "instant" {
		if t == "" {
			t = "maintain" // EC2's default
		}
		return nil, invalidValue("Fleet type '%s' is not supported by this server; use Type=instant.", t)
	}
	const tp = "TargetCapacitySpecification."
	total := p.integer(tp+"TotalTargetCapacity", 0)
	if !p.has(tp + "TotalTargetCapacity") {
		p.fail(missingParameter(tp + "TotalTargetCapacity"))
	}
	onDemand := p.integer(tp+"OnDemandTargetCapacity", 0)
	spot := p.integer(tp+"SpotTargetCapacity", 0)
	defaultType := p.str(tp + "DefaultTargetCapacityType")
	unitType := p.str(tp + "TargetCapacityUnitType")
	onDemandMin := p.integer("OnDemandOptions.MinTargetCapacity", 0)
	spotMin := p.integer("SpotOptions.MinTargetCapacity", 0)
	specs := p.tagSpecs("TagSpecification")
	if p.err != nil {
		return nil, p.err
	}
	switch {
	case total < 1 || total > maxFleetTarget:
		return nil, invalidValue("TotalTargetCapacity must be between 1 and %d.", maxFleetTarget)
	case onDemand < 0 || spot < 0 || onDemand+spot > total:
		return nil, invalidValue("OnDemandTargetCapacity and SpotTargetCapacity must not add up to more than TotalTargetCapacity.")
	case unitType != "" && unitType != "units" && unitType != "vcpu" && unitType != "memory-mib":
		return nil, invalidValue("Invalid value '%s' for TargetCapacityUnitType.", unitType)
	}
	switch defaultType {
	case "", "on-demand":
		onDemand = total - spot
	case "spot":
		spot = total - onDemand
	default:
		return nil, invalidValue("Invalid value '%s' for DefaultTargetCapacityType.", defaultType)
	}
	pools, err := s.fleetPoolsLocked(p)
	if err != nil {
		return nil, err
	}
	ordered := func(strategy string) []*fleetPool {
		if strategy != "prioritized" && strategy != "capacity-optimized-prioritized" {
			return pools // lowest-price & co: approximated by the request's order
		}
		out := slices.Clone(pools)
		slices.SortStableFunc(out, func(a, b *fleetPool) int {
			switch {
			case a.hasPriority && !b.hasPriority:
				return -1
			case !a.hasPriority && b.hasPriority:
				return 1
			case a.priority < b.priority:
				return -1
			case a.priority > b.priority:
				return 1
			}
			return 0
		})
		return out
	}

	f := &fleetFill{caps: maps.Clone(s.capacity), live: s.liveInstancesLocked(), maxLive: s.opts.MaxLiveInstances, reported: map[fleetLaunch]bool{}}
	gotOnDemand := f.fill(ordered(p.str("OnDemandOptions.AllocationStrategy")), "on-demand", float64(onDemand), unitType)
	gotSpot := f.fill(ordered(p.str("SpotOptions.AllocationStrategy")), "spot", float64(spot), unitType)

	fleetID := "fleet-" + newRequestID()
	out := &createFleetResponse{FleetID: fleetID, ErrorSet: items[fleetErrorXML]{Items: f.errors}}
	// Below a minimum target capacity an instant fleet launches nothing at all.
	if gotOnDemand < float64(onDemandMin) || gotSpot < float64(spotMin) {
		return out, nil
	}
	s.capacity = f.caps

	now := s.opts.Now()
	requestTags := tagsFor(specs, "instance")
	groups := map[fleetLaunch]*fleetInstanceXML{}
	reservations := map[fleetLaunch]string{}
	var order []fleetLaunch
	for _, l := range f.launches {
		g := groups[l]
		if g == nil {
			g = &fleetInstanceXML{LaunchTemplateAndOverrides: l.pool.overridesXML(), Lifecycle: l.lifecycle, InstanceType: l.pool.info.Name}
			groups[l] = g
			reservations[l] = "r-" + randomHex(17)
			order = append(order, l)
		}
		data := l.pool.data
		tags := data.instanceTags()
		maps.Copy(tags, requestTags)
		userData, _ := decodeUserData(data.userData) // validated when the template was created
		in := s.launchLocked(launchSpec{
			imageID: l.pool.imageID, instanceType: l.pool.info.Name, zone: l.pool.zone, subnetID: l.pool.subnetID,
			keyName: data.keyName, userData: userData, iamProfile: data.iamProfile(), lifecycle: l.lifecycle,
			tags: tags, securityGroups: data.securityGroupIDs, metadata: data.metadata,
			fleetID: fleetID, templateID: l.pool.lt.id, templateVersion: strconv.Itoa(l.pool.ver.number),
			reservationID: reservations[l], rootDevice: l.pool.rootDevice, devices: l.pool.devices,
		}, len(g.InstanceIDs.Items), now)
		g.InstanceIDs.Items = append(g.InstanceIDs.Items, in.id)
	}
	for _, l := range order {
		out.FleetInstanceSet.Items = append(out.FleetInstanceSet.Items, *groups[l])
	}
	return out, nil
}
