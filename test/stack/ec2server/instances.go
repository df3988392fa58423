// instances.go: the instance model and its state machine (pending -> running -> stopping ->
// stopped -> pending ..., anything -> shutting-down -> terminated), and the instance actions:
// RunInstances, DescribeInstances, Start/Stop/TerminateInstances, CreateTags, DeleteTags.
package ec2server

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	statePending      = "pending"
	stateRunning      = "running"
	stateShuttingDown = "shutting-down"
	stateTerminated   = "terminated"
	stateStopping     = "stopping"
	stateStopped      = "stopped"
)

var stateCodes = map[string]int{
	statePending: 0, stateRunning: 16, stateShuttingDown: 32, stateTerminated: 48, stateStopping: 64, stateStopped: 80,
}

type metadataOptions struct {
	httpTokens, httpEndpoint, instanceMetadataTags string
	hopLimit                                       int
}

type instance struct {
	id, reservationID, imageID, instanceType, zone, subnetID, privateIP, keyName string
	architecture                                                                 string
	lifecycle                                                                    string // "spot" or "on-demand"
	persistentSpot                                                               bool   // a spot instance that may be stopped
	seq                                                                          uint64
	launchIndex                                                                  int
	launchTime                                                                   time.Time
	clientToken                                                                  string

	state        string
	next         time.Time // when the current transitional state completes; zero when stable
	terminatedAt time.Time
	visibleAt    time.Time // when the API first shows the instance (ConsistencyDelay); zero: shown
	listed       bool      // filtered listings show it within its window (ShowInListings)
	reason       string    // stateTransitionReason
	stateReason  *stateReasonXML

	tags           map[string]string
	userData       string // decoded
	securityGroups []string
	iamProfile     string // ARN or name
	metadata       metadataOptions
	fleetID        string
	templateID     string
	rootDevice     string
	volumes        []volume

	spotAction string    // the spot/instance-action document, once an interruption is announced
	spotAt     time.Time // when the announced interruption terminates the instance

	runtime *instanceRuntime // non-nil while a Runtime goroutine runs for this instance
	imds    *imdsServer      // non-nil while the instance has an IMDS listener
}

func (in *instance) view() InstanceView {
	v := InstanceView{
		ID: in.id, ImageID: in.imageID, InstanceType: in.instanceType, AvailabilityZone: in.zone,
		SubnetID: in.subnetID, PrivateIP: in.privateIP, State: in.state, Lifecycle: in.lifecycle,
		LaunchTime: in.launchTime, Tags: maps.Clone(in.tags), UserData: in.userData,
		FleetID: in.fleetID, LaunchTemplateID: in.templateID,
		SecurityGroups: slices.Clone(in.securityGroups), IamInstanceProfile: in.iamProfile, Volumes: volumeViews(in.volumes),
		SpotInstanceAction: in.spotAction,
	}
	if in.imds != nil {
		v.IMDSEndpoint = in.imds.endpoint
	}
	return v
}

// advanceLocked completes every transitional state whose delay has passed at now and forgets
// terminated instances past their retention. It runs on every request and on every tick, so
// state follows the injected clock even when the clock is fake.
func (s *Server) advanceLocked(now time.Time) {
	for id, in := range s.instances {
		s.spotLocked(in, now)
		for !in.next.IsZero() && !now.Before(in.next) {
			at := in.next
			in.next = time.Time{}
			switch in.state {
			case statePending:
				in.state = stateRunning
				s.startRuntimeLocked(in)
			case stateStopping:
				in.state = stateStopped
				in.stateReason = &stateReasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
			case stateShuttingDown:
				in.state = stateTerminated
				in.terminatedAt = at
				if in.spotAt.IsZero() || now.Before(in.spotAt) { // else EC2's spot termination
					in.stateReason = &stateReasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
				}
			}
		}
		if in.state == stateTerminated && !now.Before(in.terminatedAt.Add(s.opts.TerminatedRetention)) {
			delete(s.instances, id)
		}
	}
}

func (s *Server) setStateLocked(in *instance, state string, delay time.Duration, now time.Time) {
	if in.state == stateRunning && state != stateRunning {
		s.stopRuntimeLocked(in)
	}
	in.state = state
	in.next = now.Add(delay)
	if state == stateStopping || state == stateShuttingDown {
		in.reason = "User initiated (" + now.UTC().Format("2006-01-02 15:04:05 MST") + ")"
	}
	if state == stateShuttingDown {
		s.closeIMDSLocked(in)
	}
	if state == statePending {
		// EC2 reports the time of the latest start as the launch time.
		in.reason, in.stateReason, in.launchTime = "", nil, now
	}
}

func (s *Server) liveInstancesLocked() int {
	n := 0
	for _, in := range s.instances {
		if in.state != stateTerminated && in.state != stateShuttingDown {
			n++
		}
	}
	return n
}

// launchSpec is one resolved launch: what RunInstances and CreateFleet hand to launchLocked.
type launchSpec struct {
	imageID, instanceType, zone, subnetID, keyName, userData, iamProfile string
	lifecycle                                                            string
	persistentSpot                                                       bool
	tags                                                                 map[string]string
	securityGroups                                                       []string
	metadata                                                             metadataOptions
	fleetID, templateID, templateVersion                                 string
	reservationID, clientToken                                           string
	rootDevice                                                           string
	devices                                                              []blockDevice // resolved by resolveDevicesLocked
}

func (s *Server) launchLocked(spec launchSpec, index int, now time.Time) *instance {
	s.seq++
	s.ipSeq++
	arch, _ := s.imageArch(spec.imageID)
	if t := catalogByName[spec.instanceType]; t != nil {
		arch = t.Arch
	}
	in := &instance{
		id:            "i-" + randomHex(17),
		reservationID: spec.reservationID,
		imageID:       spec.imageID, instanceType: spec.instanceType, zone: spec.zone, subnetID: spec.subnetID,
		privateIP:      "10." + strconv.Itoa(int(s.ipSeq>>16&0xff)) + "." + strconv.Itoa(int(s.ipSeq>>8&0xff)) + "." + strconv.Itoa(int(s.ipSeq&0xff)),
		keyName:        spec.keyName,
		architecture:   arch,
		lifecycle:      spec.lifecycle,
		persistentSpot: spec.persistentSpot,
		seq:            s.seq,
		launchIndex:    index,
		launchTime:     now,
		clientToken:    spec.clientToken,
		state:          statePending,
		next:           now.Add(s.opts.PendingDelay),
		tags:           maps.Clone(spec.tags),
		userData:       spec.userData,
		securityGroups: slices.Clone(spec.securityGroups),
		iamProfile:     spec.iamProfile,
		metadata:       spec.metadata,
		fleetID:        spec.fleetID,
		templateID:     spec.templateID,
		rootDevice:     spec.rootDevice,
		volumes:        newVolumes(spec.devices),
	}
	if s.opts.ConsistencyDelay > 0 {
		in.visibleAt = now.Add(s.opts.ConsistencyDelay)
	}
	if in.tags == nil {
		in.tags = map[string]string{}
	}
	// EC2 adds these system tags; they show in DescribeInstances and tag filters.
	if spec.templateID != "" {
		in.tags["aws:ec2launchtemplate:id"] = spec.templateID
		in.tags["aws:ec2launchtemplate:version"] = spec.templateVersion
	}
	if spec.fleetID != "" {
		in.tags["aws:ec2:fleet-id"] = spec.fleetID
	}
	if in.lifecycle == "" {
		in.lifecycle = "on-demand"
	}
	// The metadata options EC2 reports when none were requested (IMDSv2 required, as on
	// current AMIs; this server's IMDS requires tokens whatever the setting).
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&in.metadata.httpTokens, "required")
	def(&in.metadata.httpEndpoint, "enabled")
	def(&in.metadata.instanceMetadataTags, "disabled")
	if in.metadata.hopLimit == 0 {
		in.metadata.hopLimit = 2
	}
	s.instances[in.id] = in
	return in
}

func (in *instance) xml() *instanceXML {
	x := &instanceXML{
		InstanceID:         in.id,
		ImageID:            in.imageID,
		State:              stateXML{Code: stateCodes[in.state], Name: in.state},
		Reason:             in.reason,
		KeyName:            in.keyName,
		AmiLaunchIndex:     in.launchIndex,
		InstanceType:       in.instanceType,
		LaunchTime:         ec2Time(in.launchTime),
		Placement:          placementXML{AvailabilityZone: in.zone, Tenancy: "default"},
		Monitoring:         monitoringXML{State: "disabled"},
		SubnetID:           in.subnetID,
		StateReason:        in.stateReason,
		Architecture:       in.architecture,
		RootDeviceType:     "ebs",
		RootDeviceName:     in.rootDevice,
		BlockDeviceMapping: in.mappingsXML(),
		VirtualizationType: "hvm",
		ClientToken:        in.clientToken,
		Hypervisor:         "xen",
		MetadataOptions: &metadataOptionsXML{State: "applied", HTTPTokens: in.metadata.httpTokens,
			HTTPPutResponseHopLimit: in.metadata.hopLimit, HTTPEndpoint: in.metadata.httpEndpoint,
			InstanceMetadataTags: in.metadata.instanceMetadataTags},
	}
	if in.state != stateTerminated {
		x.PrivateIPAddress = in.privateIP
		x.PrivateDNSName = "ip-" + strings.ReplaceAll(in.privateIP, ".", "-") + ".ec2.internal"
	}
	if in.subnetID != "" {
		x.VpcID = "vpc-" + randomHexFrom(in.subnetID)
	}
	if in.lifecycle == "spot" {
		x.InstanceLifecycle = "spot"
		x.SpotInstanceRequestID = "sir-" + in.id[2:10]
	}
	var groups []groupXML
	for _, g := range in.securityGroups {
		groups = append(groups, groupXML{GroupID: g})
	}
	x.GroupSet = itemsOf(groups)
	x.TagSet = itemsOf(tagsXML(in.tags))
	if in.iamProfile != "" {
		arn := in.iamProfile
		if !strings.HasPrefix(arn, "arn:") {
			arn = "arn:aws:iam::" + accountID + ":instance-profile/" + arn
		}
		x.IamInstanceProfile = &iamProfileXML{Arn: arn, ID: "AIPA" + strings.ToUpper(randomHexFrom(arn))}
	}
	return x
}

// randomHexFrom derives a stable 17-hex-digit id from a string (vpc of a subnet, and so on).
func randomHexFrom(s string) string {
	var h uint64 = 14695981039346656037 // FNV-1a 64
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return strconv.FormatUint(h|1<<63, 16)[:16] + "0"
}

func tagsXML(tags map[string]string) []tagXML {
	keys := slices.Sorted(maps.Keys(tags))
	out := make([]tagXML, 0, len(keys))
	for _, k := range keys {
		out = append(out, tagXML{Key: k, Value: tags[k]})
	}
	return out
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// ---- RunInstances ----

func (s *Server) runInstances(p *params) (response, *apiError) {
	now := s.opts.Now()
	minCount := p.integer("MinCount", 0)
	maxCount := p.integer("MaxCount", 0)
	if !p.has("MinCount") {
		p.fail(missingParameter("MinCount"))
	}
	if !p.has("MaxCount") {
		p.fail(missingParameter("MaxCount"))
	}
	if p.err != nil {
		return nil, p.err
	}
	if minCount < 1 || maxCount < 1 {
		return nil, invalidValue("MinCount and MaxCount must be at least 1.")
	}
	if minCount > maxCount {
		return nil, invalidValue("MinCount (%d) must not be greater than MaxCount (%d).", minCount, maxCount)
	}

	// A launch template provides defaults that the request's own parameters override.
	var data ltData
	var ltID, ltVersion string
	if p.hasPrefix("LaunchTemplate") {
		lt, err := s.findTemplateLocked(p.str("LaunchTemplate.LaunchTemplateId"), p.str("LaunchTemplate.LaunchTemplateName"))
		if err != nil {
			return nil, err
		}
		v, err := lt.version(p.str("LaunchTemplate.Version"))
		if err != nil {
			return nil, err
		}
		data, ltID, ltVersion = v.data, lt.id, strconv.Itoa(v.number)
	}
	req := p.launchTemplateData("")
	if p.err != nil {
		return nil, p.err
	}
	data = data.merge(req)

	if data.imageID == "" {
		return nil, missingParameter("ImageId")
	}
	if data.instanceType == "" {
		data.instanceType = "t3.micro" // EC2's default is m1.small, which the catalogue lacks
	}
	if err := s.checkTypeAndImageLocked(data.instanceType, data.imageID); err != nil {
		return nil, err
	}
	if err := s.checkLaunchResourcesLocked(data.imageID, data.securityGroupIDs, data.iamProfile()); err != nil {
		return nil, err
	}
	rootDevice, devices, aerr := s.resolveDevicesLocked(data.imageID, data.blockDevices)
	if aerr != nil {
		return nil, aerr
	}
	userData, err := decodeUserData(data.userData)
	if err != nil {
		return nil, err
	}

	subnet := p.str("SubnetId")
	zone := p.str("Placement.AvailabilityZone")
	if subnet != "" {
		sz := s.zoneForSubnet(subnet)
		if zone != "" && zone != sz {
			return nil, invalidCombination("The subnet %s is in %s, not in the requested Availability Zone %s.", subnet, sz, zone)
		}
		zone = sz
	}
	if zone == "" {
		zone = s.opts.Region + "a"
	}

	if live, maxLive := s.liveInstancesLocked(), s.opts.MaxLiveInstances; live+minCount > maxLive {
		return nil, &apiError{Status: 400, Code: "InstanceLimitExceeded",
			Message: "You have requested more instances (" + strconv.Itoa(minCount) + ") than your current instance limit of " + strconv.Itoa(maxLive) + " allows."}
	} else {
		maxCount = min(maxCount, maxLive-live)
	}
	n := maxCount
	if left := capacityLeft(s.capacity, data.instanceType, zone); left >= 0 && left < n {
		n = left
	}
	if n < minCount {
		return nil, insufficientCapacity(data.instanceType, zone)
	}
	consumeCapacity(s.capacity, data.instanceType, zone, n)

	spec := launchSpec{
		imageID: data.imageID, instanceType: data.instanceType, zone: zone, subnetID: subnet,
		keyName: data.keyName, userData: userData, iamProfile: data.iamProfile(),
		lifecycle:      "on-demand",
		tags:           data.instanceTags(),
		securityGroups: data.securityGroupIDs,
		metadata:       data.metadata,
		templateID:     ltID, templateVersion: ltVersion,
		reservationID: "r-" + randomHex(17),
		clientToken:   p.str("ClientToken"),
		rootDevice:    rootDevice, devices: devices,
	}
	if data.marketType == "spot" {
		spec.lifecycle = "spot"
		spec.persistentSpot = data.spotInstanceType == "persistent"
	}
	out := &runInstancesResponse{}
	out.ReservationID, out.OwnerID = spec.reservationID, accountID
	for i := range n {
		in := s.launchLocked(spec, i, now)
		out.InstancesSet.Items = append(out.InstancesSet.Items, in.xml())
	}
	for _, g := range spec.securityGroups {
		out.GroupSet.Items = append(out.GroupSet.Items, groupXML{GroupID: g})
	}
	return out, nil
}

// checkTypeAndImageLocked validates the instance type against the catalogue and, for images
// declared with SetImage, the architecture.
func (s *Server) checkTypeAndImageLocked(instanceType, imageID string) *apiError {
	t := catalogByName[instanceType]
	if t == nil {
		return invalidValue("Invalid value '%s' for InstanceType.", instanceType)
	}
	if arch, declared := s.imageArch(imageID); declared && arch != t.Arch {
		return invalidValue("The architecture '%s' of the specified instance type does not match the architecture '%s' of the specified AMI.", t.Arch, arch)
	}
	return nil
}

func insufficientCapacity(instanceType, zone string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "InsufficientInstanceCapacity", Message: iceMessage(instanceType, zone)}
}

func iceMessage(instanceType, zone string) string {
	return "We currently do not have sufficient " + instanceType + " capacity in the Availability Zone you requested (" +
		zone + "). Our system will be working on provisioning additional capacity."
}

// ---- DescribeInstances ----

var instanceFilters = map[string]func(in *instance) []string{
	"instance-id":         func(in *instance) []string { return []string{in.id} },
	"instance-type":       func(in *instance) []string { return []string{in.instanceType} },
	"instance-state-name": func(in *instance) []string { return []string{in.state} },
	"instance-state-code": func(in *instance) []string { return []string{strconv.Itoa(stateCodes[in.state])} },
	"availability-zone":   func(in *instance) []string { return []string{in.zone} },
	"subnet-id":           func(in *instance) []string { return []string{in.subnetID} },
	"image-id":            func(in *instance) []string { return []string{in.imageID} },
	"reservation-id":      func(in *instance) []string { return []string{in.reservationID} },
	"private-ip-address":  func(in *instance) []string { return []string{in.privateIP} },
	"key-name":            func(in *instance) []string { return []string{in.keyName} },
	"architecture":        func(in *instance) []string { return []string{in.architecture} },
	"client-token":        func(in *instance) []string { return []string{in.clientToken} },
	"instance-lifecycle": func(in *instance) []string {
		if in.lifecycle == "spot" {
			return []string{"spot"}
		}
		return nil // on-demand instances have no lifecycle value in EC2
	},
	"tag-key":   func(in *instance) []string { return slices.Collect(maps.Keys(in.tags)) },
	"tag-value": func(in *instance) []string { return slices.Collect(maps.Values(in.tags)) },
}

func instanceFilterValues(in *instance, name string) ([]string, bool) {
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := in.tags[key]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	f, ok := instanceFilters[name]
	if !ok {
		return nil, false
	}
	return f(in), true
}

// lookupInstancesLocked resolves InstanceId.N values: malformed ids and unknown ids fail the
// whole call, as in EC2. An instance not yet visible (ConsistencyDelay) is unknown.
func (s *Server) lookupInstancesLocked(ids []string) ([]*instance, *apiError) {
	now := s.opts.Now()
	var missing []string
	out := make([]*instance, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if !validResourceID(id, "i") {
			return nil, &apiError{Status: 400, Code: "InvalidInstanceID.Malformed", Message: "Invalid id: \"" + id + "\""}
		}
		in, ok := s.instances[id]
		if !ok || !in.visibleLocked(now) {
			missing = append(missing, id)
			continue
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, in)
		}
	}
	switch len(missing) {
	case 0:
		return out, nil
	case 1:
		return nil, &apiError{Status: 400, Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + missing[0] + "' does not exist"}
	default:
		return nil, &apiError{Status: 400, Code: "InvalidInstanceID.NotFound", Message: "The instance IDs '" + strings.Join(missing, ", ") + "' do not exist"}
	}
}

func (s *Server) describeInstances(p *params) (response, *apiError) {
	ids := p.list("InstanceId")
	filters := p.filters()
	maxResults, after, _ := p.paging(5, 1000)
	if p.err != nil {
		return nil, p.err
	}
	if len(ids) > 0 && maxResults > 0 {
		return nil, invalidCombination("The parameter instancesSet cannot be used with the parameter maxResults")
	}
	for _, f := range filters {
		if _, ok := instanceFilterValues(&instance{}, f.name); !ok {
			return nil, invalidValue("The filter '%s' is invalid", f.name)
		}
	}
	var candidates []*instance
	if len(ids) > 0 {
		var err *apiError
		if candidates, err = s.lookupInstancesLocked(ids); err != nil {
			return nil, err
		}
	} else {
		now := s.opts.Now()
		candidates = slices.DeleteFunc(s.sortedInstancesLocked(), func(in *instance) bool { return !in.listedLocked(now) })
	}
	var matched []*instance
	for _, in := range candidates {
		if in.seq <= after {
			continue
		}
		ok := true
		for _, f := range filters {
			vals, _ := instanceFilterValues(in, f.name)
			if !matchAny(f.values, vals) {
				ok = false
				break
			}
		}
		if ok {
			matched = append(matched, in)
		}
	}
	out := &describeInstancesResponse{}
	if maxResults > 0 && len(matched) > maxResults {
		matched = matched[:maxResults]
		out.NextToken = pageToken(matched[len(matched)-1].seq)
	}
	// Group into reservations, keeping first-seen order.
	byRes := map[string]*reservationXML{}
	for _, in := range matched {
		r := byRes[in.reservationID]
		if r == nil {
			r = &reservationXML{ReservationID: in.reservationID, OwnerID: accountID}
			byRes[in.reservationID] = r
			out.ReservationSet.Items = append(out.ReservationSet.Items, r)
		}
		r.InstancesSet.Items = append(r.InstancesSet.Items, in.xml())
	}
	return out, nil
}

// ---- Start / Stop / Terminate ----

func (s *Server) stateChange(p *params, action string, apply func(in *instance, now time.Time) *apiError) (response, *apiError) {
	ids := p.list("InstanceId")
	if p.err != nil {
		return nil, p.err
	}
	if len(ids) == 0 {
		return nil, missingParameter("InstanceId")
	}
	insts, err := s.lookupInstancesLocked(ids)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	// Validate every instance first so that a bad one changes nothing.
	for _, in := range insts {
		if err := apply(in, time.Time{}); err != nil {
			return nil, err
		}
	}
	out := &stateChangeResponse{XMLName: rootName(action)}
	for _, in := range insts {
		prev := in.state
		_ = apply(in, now)
		out.InstancesSet.Items = append(out.InstancesSet.Items, stateChangeXML{
			InstanceID:    in.id,
			CurrentState:  stateXML{Code: stateCodes[in.state], Name: in.state},
			PreviousState: stateXML{Code: stateCodes[prev], Name: prev},
		})
	}
	return out, nil
}

// The apply functions below validate when now is zero and transition otherwise.

func (s *Server) startInstances(p *params) (response, *apiError) {
	need := map[capacityKey]int{}
	return s.stateChange(p, "StartInstances", func(in *instance, now time.Time) *apiError {
		switch in.state {
		case statePending, stateRunning:
			return nil // already started: reported unchanged
		case stateStopped:
		default:
			return &apiError{Status: 400, Code: "IncorrectInstanceState",
				Message: "The instance '" + in.id + "' is not in a state from which it can be started."}
		}
		k := capacityKey{in.instanceType, in.zone}
		if now.IsZero() {
			need[k]++
			if left := capacityLeft(s.capacity, in.instanceType, in.zone); left >= 0 && left < need[k] {
				return insufficientCapacity(in.instanceType, in.zone)
			}
			return nil
		}
		consumeCapacity(s.capacity, in.instanceType, in.zone, 1)
		s.setStateLocked(in, statePending, s.opts.PendingDelay, now)
		return nil
	})
}

func (s *Server) stopInstances(p *params) (response, *apiError) {
	return s.stateChange(p, "StopInstances", func(in *instance, now time.Time) *apiError {
		switch in.state {
		case stateStopping, stateStopped:
			return nil
		case statePending, stateRunning:
		default:
			return &apiError{Status: 400, Code: "IncorrectInstanceState",
				Message: "This instance '" + in.id + "' is not in a state from which it can be stopped."}
		}
		if in.lifecycle == "spot" && !in.persistentSpot {
			return &apiError{Status: 400, Code: "UnsupportedOperation",
				Message: "You can't stop the Spot Instance '" + in.id + "' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests."}
		}
		if !now.IsZero() {
			s.setStateLocked(in, stateStopping, s.opts.StoppingDelay, now)
		}
		return nil
	})
}

func (s *Server) terminateInstances(p *params) (response, *apiError) {
	return s.stateChange(p, "TerminateInstances", func(in *instance, now time.Time) *apiError {
		if now.IsZero() || in.state == stateShuttingDown || in.state == stateTerminated {
			return nil // terminating a terminated instance is a no-op, as in EC2
		}
		s.setStateLocked(in, stateShuttingDown, s.opts.ShuttingDownDelay, now)
		return nil
	})
}

// ---- tags ----

// taggableLocked resolves a ResourceId to its tag map: instances and launch templates are
// modelled; other well-formed ids (fleets, volumes, ...) are accepted and ignored.
func (s *Server) taggableLocked(id string) (map[string]string, *apiError) {
	switch {
	case strings.HasPrefix(id, "i-"):
		if !validResourceID(id, "i") {
			return nil, &apiError{Status: 400, Code: "InvalidInstanceID.Malformed", Message: "Invalid id: \"" + id + "\""}
		}
		in, ok := s.instances[id]
		if !ok || !in.visibleLocked(s.opts.Now()) {
			return nil, &apiError{Status: 400, Code: "InvalidInstanceID.NotFound", Message: "The instance ID '" + id + "' does not exist"}
		}
		return in.tags, nil
	case strings.HasPrefix(id, "lt-"):
		lt, ok := s.templates[id]
		if !ok {
			return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateId.NotFound", Message: "The specified launch template, with template ID " + id + ", does not exist."}
		}
		return lt.tags, nil
	}
	prefix, rest, ok := strings.Cut(id, "-")
	if !ok || prefix == "" || rest == "" {
		return nil, &apiError{Status: 400, Code: "InvalidID", Message: "The ID '" + id + "' is not valid"}
	}
	return nil, nil
}

func (s *Server) createTags(p *params) (response, *apiError) {
	ids := p.list("ResourceId")
	tags, _ := p.tags("Tag")
	if p.err != nil {
		return nil, p.err
	}
	if len(ids) == 0 {
		return nil, missingParameter("ResourceId")
	}
	if len(tags) == 0 {
		return nil, missingParameter("Tag")
	}
	if err := validateTags(tags); err != nil {
		return nil, err
	}
	var targets []map[string]string
	for _, id := range ids {
		m, err := s.taggableLocked(id)
		if err != nil {
			return nil, err
		}
		if m != nil {
			n := len(m)
			for _, t := range tags {
				if _, ok := m[t.key]; !ok {
					n++
				}
			}
			if n > maxTagsPerResource+3 { // the system aws:* tags do not count
				return nil, &apiError{Status: 400, Code: "TagLimitExceeded", Message: "The maximum number of tags per resource is 50."}
			}
			targets = append(targets, m)
		}
	}
	for _, m := range targets {
		for _, t := range tags {
			m[t.key] = t.value
		}
	}
	return &returnResponse{XMLName: rootName("CreateTags"), Return: true}, nil
}

func (s *Server) deleteTags(p *params) (response, *apiError) {
	ids := p.list("ResourceId")
	tags, valueSet := p.tags("Tag")
	if p.err != nil {
		return nil, p.err
	}
	if len(ids) == 0 {
		return nil, missingParameter("ResourceId")
	}
	for _, t := range tags {
		if strings.HasPrefix(strings.ToLower(t.key), "aws:") {
			return nil, invalidValue("Tag keys starting with 'aws:' are reserved for internal use.")
		}
	}
	var targets []map[string]string
	for _, id := range ids {
		m, err := s.taggableLocked(id)
		if err != nil {
			return nil, err
		}
		if m != nil {
			targets = append(targets, m)
		}
	}
	for _, m := range targets {
		if len(tags) == 0 { // no Tag.N: delete every user tag
			for k := range m {
				if !strings.HasPrefix(k, "aws:") {
					delete(m, k)
				}
			}
			continue
		}
		for i, t := range tags {
			if v, ok := m[t.key]; ok && (!valueSet[i] || v == t.value) {
				delete(m, t.key)
			}
		}
	}
	return &returnResponse{XMLName: rootName("DeleteTags"), Return: true}, nil
}
