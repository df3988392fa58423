// templates.go: launch templates and their versions (Create/Describe/Modify/Delete
// LaunchTemplate, Create/DescribeLaunchTemplateVersions) and the launch data they carry, which
// RunInstances and CreateFleet resolve into instances.
package ec2server

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"
)

type launchTemplate struct {
	id, name       string
	created        time.Time
	seq            uint64
	defaultVersion int
	versions       []*ltVersion // versions[i].number == i+1
	tags           map[string]string
}

type ltVersion struct {
	number      int
	description string
	created     time.Time
	data        ltData
}

// ltData is launch data, as in a template version or a RunInstances call. set records which
// fields were given, so that a version built on a SourceVersion, or a RunInstances call on a
// template, overrides only those.
type ltData struct {
	imageID, instanceType, userData, keyName string // userData is base64, as sent
	iamArn, iamName                          string
	securityGroupIDs, securityGroups         []string
	tagSpecs                                 []tagSpec
	metadata                                 metadataOptions
	marketType, spotInstanceType             string
	blockDevices                             []blockDevice
	set                                      map[string]bool
}

// launchTemplateData reads launch data under prefix ("LaunchTemplateData." for templates, ""
// for RunInstances, whose parameters have the same names).
func (p *params) launchTemplateData(prefix string) ltData {
	d := ltData{set: map[string]bool{}}
	str := func(field string, dst *string) {
		if p.has(prefix + field) {
			*dst = p.str(prefix + field)
			d.set[field] = true
		}
	}
	str("ImageId", &d.imageID)
	str("InstanceType", &d.instanceType)
	str("UserData", &d.userData)
	str("KeyName", &d.keyName)
	if p.hasPrefix(prefix + "IamInstanceProfile") {
		d.iamArn, d.iamName = p.str(prefix+"IamInstanceProfile.Arn"), p.str(prefix+"IamInstanceProfile.Name")
		d.set["IamInstanceProfile"] = true
	}
	if p.hasPrefix(prefix + "SecurityGroupId") {
		d.securityGroupIDs = p.list(prefix + "SecurityGroupId")
		d.set["SecurityGroupId"] = true
	}
	if p.hasPrefix(prefix + "SecurityGroup") {
		d.securityGroups = p.list(prefix + "SecurityGroup")
		d.set["SecurityGroup"] = len(d.securityGroups) > 0
	}
	if p.hasPrefix(prefix + "BlockDeviceMapping") {
		d.blockDevices = p.blockDevices(prefix)
		d.set["BlockDeviceMapping"] = true
	}
	if p.hasPrefix(prefix + "TagSpecification") {
		d.tagSpecs = p.tagSpecs(prefix + "TagSpecification")
		d.set["TagSpecification"] = true
	}
	if p.hasPrefix(prefix + "MetadataOptions") {
		mp := prefix + "MetadataOptions."
		d.metadata = metadataOptions{
			httpTokens:           p.str(mp + "HttpTokens"),
			httpEndpoint:         p.str(mp + "HttpEndpoint"),
			instanceMetadataTags: p.str(mp + "InstanceMetadataTags"),
			hopLimit:             p.integer(mp+"HttpPutResponseHopLimit", 0),
		}
		d.set["MetadataOptions"] = true
		check := func(field, v string, allowed ...string) {
			if v != "" && !slices.Contains(allowed, v) {
				p.fail(invalidValue("Invalid value '%s' for %s.", v, mp+field))
			}
		}
		check("HttpTokens", d.metadata.httpTokens, "optional", "required")
		check("HttpEndpoint", d.metadata.httpEndpoint, "enabled", "disabled")
		check("InstanceMetadataTags", d.metadata.instanceMetadataTags, "enabled", "disabled")
		if d.metadata.hopLimit < 0 || d.metadata.hopLimit > 64 {
			p.fail(invalidValue("HttpPutResponseHopLimit must be between 1 and 64."))
		}
	}
	if p.hasPrefix(prefix + "InstanceMarketOptions") {
		d.marketType = p.str(prefix + "InstanceMarketOptions.MarketType")
		d.spotInstanceType = p.str(prefix + "InstanceMarketOptions.SpotOptions.SpotInstanceType")
		d.set["InstanceMarketOptions"] = true
		if d.marketType != "" && d.marketType != "spot" && d.marketType != "capacity-block" {
			p.fail(invalidValue("Invalid value '%s' for InstanceMarketOptions.MarketType.", d.marketType))
		}
		if d.spotInstanceType != "" && d.spotInstanceType != "one-time" && d.spotInstanceType != "persistent" {
			p.fail(invalidValue("Invalid value '%s' for SpotInstanceType.", d.spotInstanceType))
		}
	}
	if d.instanceType != "" && catalogByName[d.instanceType] == nil {
		p.fail(invalidValue("Invalid value '%s' for InstanceType.", d.instanceType))
	}
	if _, err := decodeUserData(d.userData); err != nil {
		p.fail(err)
	}
	return d
}

func (d ltData) empty() bool { return len(d.set) == 0 }

// merge returns d overridden by every field set in o. Tag specifications accumulate (o's tags
// win per key), which is how EC2 combines a template's tags with a request's.
func (d ltData) merge(o ltData) ltData {
	out := d
	out.set = maps.Clone(d.set)
	if out.set == nil {
		out.set = map[string]bool{}
	}
	for f := range o.set {
		out.set[f] = true
		switch f {
		case "ImageId":
			out.imageID = o.imageID
		case "InstanceType":
			out.instanceType = o.instanceType
		case "UserData":
			out.userData = o.userData
		case "KeyName":
			out.keyName = o.keyName
		case "IamInstanceProfile":
			out.iamArn, out.iamName = o.iamArn, o.iamName
		case "SecurityGroupId":
			out.securityGroupIDs = o.securityGroupIDs
		case "SecurityGroup":
			out.securityGroups = o.securityGroups
		case "BlockDeviceMapping":
			out.blockDevices = o.blockDevices
		case "TagSpecification":
			out.tagSpecs = append(slices.Clone(d.tagSpecs), o.tagSpecs...)
		case "MetadataOptions":
			out.metadata = o.metadata
		case "InstanceMarketOptions":
			out.marketType, out.spotInstanceType = o.marketType, o.spotInstanceType
		}
	}
	return out
}

func (d ltData) iamProfile() string {
	if d.iamArn != "" {
		return d.iamArn
	}
	return d.iamName
}

func (d ltData) instanceTags() map[string]string { return tagsFor(d.tagSpecs, "instance") }

func (d ltData) xml() ltDataXML {
	x := ltDataXML{
		ImageID: d.imageID, InstanceType: d.instanceType, KeyName: d.keyName, UserData: d.userData,
		SecurityGroupIDs: itemsOf(d.securityGroupIDs), SecurityGroups: itemsOf(d.securityGroups),
	}
	if d.iamArn != "" || d.iamName != "" {
		x.IamInstanceProfile = &ltIamXML{Arn: d.iamArn, Name: d.iamName}
	}
	var specs []ltTagSpecXML
	for _, ts := range d.tagSpecs {
		spec := ltTagSpecXML{ResourceType: ts.resourceType}
		for _, t := range ts.tags {
			spec.TagSet.Items = append(spec.TagSet.Items, tagXML{Key: t.key, Value: t.value})
		}
		specs = append(specs, spec)
	}
	x.TagSpecifications = itemsOf(specs)
	var bdms []ltMappingXML
	for _, b := range d.blockDevices {
		m := ltMappingXML{DeviceName: b.deviceName}
		m.Ebs.VolumeType, m.Ebs.VolumeSize, m.Ebs.Iops, m.Ebs.Throughput, m.Ebs.DeleteOnTermination = b.volumeType, b.sizeGiB, b.iops, b.tput, b.deleteOnTermination
		m.Ebs.Encrypted = b.encrypted
		bdms = append(bdms, m)
	}
	x.BlockDeviceMappings = itemsOf(bdms)
	if d.set["MetadataOptions"] {
		x.MetadataOptions = &metadataOptionsXML{HTTPTokens: d.metadata.httpTokens, HTTPPutResponseHopLimit: d.metadata.hopLimit,
			HTTPEndpoint: d.metadata.httpEndpoint, InstanceMetadataTags: d.metadata.instanceMetadataTags}
	}
	if d.marketType != "" {
		x.InstanceMarketOptions = &ltMarketOptionsXML{MarketType: d.marketType}
		if d.spotInstanceType != "" {
			x.InstanceMarketOptions.SpotOptions = &ltSpotOptionsXML{SpotInstanceType: d.spotInstanceType}
		}
	}
	return x
}

// version resolves a version string: "", "$Default", "$Latest" or a number.
func (lt *launchTemplate) version(v string) (*ltVersion, *apiError) {
	n := 0
	switch v {
	case "", "$Default":
		n = lt.defaultVersion
	case "$Latest": // the highest version not deleted
		n = len(lt.versions)
		for n > 1 && lt.versions[n-1] == nil {
			n--
		}
	default:
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return nil, invalidValue("The launch template version '%s' is invalid. Specify a version number, $Latest or $Default.", v)
		}
	}
	if n < 1 || n > len(lt.versions) || lt.versions[n-1] == nil {
		return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateId.VersionNotFound",
			Message: "Could not find launch template version " + v + " for launch template " + lt.id + "."}
	}
	return lt.versions[n-1], nil
}

func (lt *launchTemplate) xml() launchTemplateXML {
	return launchTemplateXML{
		LaunchTemplateID: lt.id, LaunchTemplateName: lt.name, CreateTime: ec2Time(lt.created),
		CreatedBy:            "arn:aws:iam::" + accountID + ":root",
		DefaultVersionNumber: lt.defaultVersion, LatestVersionNumber: len(lt.versions),
		TagSet: itemsOf(tagsXML(lt.tags)),
	}
}

func (lt *launchTemplate) versionXML(v *ltVersion) launchTemplateVersionXML {
	return launchTemplateVersionXML{
		LaunchTemplateID: lt.id, LaunchTemplateName: lt.name, VersionNumber: v.number,
		VersionDescription: v.description, CreateTime: ec2Time(v.created),
		CreatedBy:      "arn:aws:iam::" + accountID + ":root",
		DefaultVersion: v.number == lt.defaultVersion, LaunchTemplateData: v.data.xml(),
	}
}

var templateNameRE = regexp.MustCompile(`^[a-zA-Z0-9().\-/_]{3,128}$`)

// findTemplateLocked resolves a template by id or by name (exactly one must be given).
func (s *Server) findTemplateLocked(id, name string) (*launchTemplate, *apiError) {
	switch {
	case id == "" && name == "":
		return nil, missingParameter("LaunchTemplateId or LaunchTemplateName")
	case id != "" && name != "":
		return nil, invalidCombination("Specify either a launch template ID or a launch template name, not both.")
	case id != "":
		if !validResourceID(id, "lt") {
			return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateId.Malformed", Message: "The specified launch template ID " + id + " is malformed."}
		}
		if lt, ok := s.templates[id]; ok {
			return lt, nil
		}
		return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateId.NotFound",
			Message: "The specified launch template, with template ID " + id + ", does not exist."}
	}
	if lt, ok := s.templates[s.templateNames[name]]; ok {
		return lt, nil
	}
	return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateName.NotFoundException",
		Message: "The specified launch template, with template name " + name + ", does not exist."}
}

func (s *Server) createLaunchTemplate(p *params) (response, *apiError) {
	name := p.required("LaunchTemplateName")
	data := p.launchTemplateData("LaunchTemplateData.")
	specs := p.tagSpecs("TagSpecification")
	desc := p.str("VersionDescription")
	if p.err != nil {
		return nil, p.err
	}
	if data.empty() {
		return nil, missingParameter("LaunchTemplateData")
	}
	if !templateNameRE.MatchString(name) {
		return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateName.MalformedException",
			Message: "A launch template name must be between 3 and 128 characters, and may contain letters, numbers, and the following characters: - ( ) . / _"}
	}
	if _, ok := s.templateNames[name]; ok {
		return nil, &apiError{Status: 400, Code: "InvalidLaunchTemplateName.AlreadyExistsException",
			Message: "Launch template name already in use."}
	}
	now := s.opts.Now()
	s.templateSeq++
	lt := &launchTemplate{
		id: "lt-" + randomHex(17), name: name, created: now, seq: s.templateSeq, defaultVersion: 1,
		versions: []*ltVersion{{number: 1, description: desc, created: now, data: data}},
		tags:     tagsFor(specs, "launch-template"),
	}
	s.templates[lt.id] = lt
	s.templateNames[name] = lt.id
	return &launchTemplateResponse{XMLName: rootName("CreateLaunchTemplate"), LaunchTemplate: lt.xml()}, nil
}

func (s *Server) createLaunchTemplateVersion(p *params) (response, *apiError) {
	data := p.launchTemplateData("LaunchTemplateData.")
	desc := p.str("VersionDescription")
	if p.err != nil {
		return nil, p.err
	}
	lt, err := s.findTemplateLocked(p.str("LaunchTemplateId"), p.str("LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	if data.empty() {
		return nil, missingParameter("LaunchTemplateData")
	}
	if src := p.str("SourceVersion"); src != "" {
		base, err := lt.version(src)
		if err != nil {
			return nil, err
		}
		merged := base.data.merge(data)
		if data.set["TagSpecification"] {
			// A new version's tag specifications replace the source version's (RunInstances,
			// by contrast, adds to its template's).
			merged.tagSpecs = data.tagSpecs
		}
		data = merged
	}
	v := &ltVersion{number: len(lt.versions) + 1, description: desc, created: s.opts.Now(), data: data}
	lt.versions = append(lt.versions, v)
	return &createLaunchTemplateVersionResponse{LaunchTemplateVersion: lt.versionXML(v)}, nil
}

func (s *Server) sortedTemplatesLocked() []*launchTemplate {
	out := slices.Collect(maps.Values(s.templates))
	slices.SortFunc(out, func(a, b *launchTemplate) int { return int(a.seq) - int(b.seq) })
	return out
}

var templateFilters = map[string]func(lt *launchTemplate) []string{
	"launch-template-name": func(lt *launchTemplate) []string { return []string{lt.name} },
	"tag-key":              func(lt *launchTemplate) []string { return slices.Collect(maps.Keys(lt.tags)) },
}

func (s *Server) describeLaunchTemplates(p *params) (response, *apiError) {
	ids := p.list("LaunchTemplateId")
	names := p.list("LaunchTemplateName")
	filters := p.filters()
	maxResults, after, _ := p.paging(1, 200)
	if p.err != nil {
		return nil, p.err
	}
	var candidates []*launchTemplate
	if len(ids) > 0 || len(names) > 0 {
		for _, id := range ids {
			lt, err := s.findTemplateLocked(id, "")
			if err != nil {
				return nil, err
			}
			candidates = append(candidates, lt)
		}
		for _, n := range names {
			lt, err := s.findTemplateLocked("", n)
			if err != nil {
				return nil, err
			}
			candidates = append(candidates, lt)
		}
	} else {
		candidates = s.sortedTemplatesLocked()
	}
	out := &describeLaunchTemplatesResponse{}
	for _, lt := range candidates {
		if lt.seq <= after {
			continue
		}
		ok := true
		for _, f := range filters {
			var vals []string
			if key, isTag := cutTagFilter(f.name); isTag {
				if v, has := lt.tags[key]; has {
					vals = []string{v}
				}
			} else if fn, known := templateFilters[f.name]; known {
				vals = fn(lt)
			} else {
				return nil, invalidValue("The filter '%s' is invalid", f.name)
			}
			if !matchAny(f.values, vals) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if maxResults > 0 && len(out.LaunchTemplates.Items) == maxResults {
			out.NextToken = pageToken(lt.seq - 1)
			break
		}
		out.LaunchTemplates.Items = append(out.LaunchTemplates.Items, lt.xml())
	}
	return out, nil
}

func cutTagFilter(name string) (string, bool) {
	if len(name) > 4 && name[:4] == "tag:" {
		return name[4:], true
	}
	return "", false
}

func (s *Server) describeLaunchTemplateVersions(p *params) (response, *apiError) {
	id, name := p.str("LaunchTemplateId"), p.str("LaunchTemplateName")
	versions := p.list("LaunchTemplateVersion")
	minV := p.integer("MinVersion", 0)
	maxV := p.integer("MaxVersion", 0)
	filters := p.filters()
	maxResults, after, _ := p.paging(1, 200)
	if p.err != nil {
		return nil, p.err
	}
	for _, f := range filters {
		if f.name != "is-default-version" {
			return nil, invalidValue("The filter '%s' is invalid", f.name)
		}
	}
	var templates []*launchTemplate
	if id != "" || name != "" {
		lt, err := s.findTemplateLocked(id, name)
		if err != nil {
			return nil, err
		}
		templates = []*launchTemplate{lt}
	} else {
		// Without a template, EC2 only accepts $Latest / $Default, across all templates.
		if len(versions) == 0 {
			return nil, missingParameter("LaunchTemplateId or LaunchTemplateName")
		}
		for _, v := range versions {
			if v != "$Latest" && v != "$Default" {
				return nil, invalidCombination("Without a launch template ID or name, only $Latest and $Default versions can be described.")
			}
		}
		templates = s.sortedTemplatesLocked()
	}
	out := &describeLaunchTemplateVersionsResponse{}
	pos := uint64(0)
	for _, lt := range templates {
		var picked []*ltVersion
		if len(versions) > 0 {
			seen := map[int]bool{}
			for _, v := range versions {
				ver, err := lt.version(v)
				if err != nil {
					return nil, err
				}
				if !seen[ver.number] {
					seen[ver.number] = true
					picked = append(picked, ver)
				}
			}
		} else {
			for _, v := range lt.versions {
				if v != nil { // deleted
					picked = append(picked, v)
				}
			}
		}
		for _, v := range picked {
			if (minV > 0 && v.number < minV) || (maxV > 0 && v.number > maxV) {
				continue
			}
			isDefault := strconv.FormatBool(v.number == lt.defaultVersion)
			ok := true
			for _, f := range filters {
				ok = ok && matchAny(f.values, []string{isDefault})
			}
			if !ok {
				continue
			}
			pos++
			if pos <= after {
				continue
			}
			if maxResults > 0 && len(out.LaunchTemplateVersionSet.Items) == maxResults {
				out.NextToken = pageToken(pos - 1)
				return out, nil
			}
			out.LaunchTemplateVersionSet.Items = append(out.LaunchTemplateVersionSet.Items, lt.versionXML(v))
		}
	}
	return out, nil
}

func (s *Server) modifyLaunchTemplate(p *params) (response, *apiError) {
	lt, err := s.findTemplateLocked(p.str("LaunchTemplateId"), p.str("LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	if dv := p.str("SetDefaultVersion"); dv != "" {
		v, err := lt.version(dv)
		if err != nil {
			return nil, err
		}
		lt.defaultVersion = v.number
	}
	return &launchTemplateResponse{XMLName: rootName("ModifyLaunchTemplate"), LaunchTemplate: lt.xml()}, nil
}

func (s *Server) deleteLaunchTemplate(p *params) (response, *apiError) {
	lt, err := s.findTemplateLocked(p.str("LaunchTemplateId"), p.str("LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	delete(s.templates, lt.id)
	delete(s.templateNames, lt.name)
	return &launchTemplateResponse{XMLName: rootName("DeleteLaunchTemplate"), LaunchTemplate: lt.xml()}, nil
}

// deleteLaunchTemplateVersions deletes versions of one template; the default version cannot be
// deleted, and versions that cannot be deleted are reported per version, not as a call error.
func (s *Server) deleteLaunchTemplateVersions(p *params) (response, *apiError) {
	versions := p.list("LaunchTemplateVersion")
	if p.err != nil {
		return nil, p.err
	}
	lt, err := s.findTemplateLocked(p.str("LaunchTemplateId"), p.str("LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, missingParameter("LaunchTemplateVersion")
	}
	out := &deleteLaunchTemplateVersionsResponse{}
	for _, v := range versions {
		n, convErr := strconv.Atoi(v)
		item := deletedVersionXML{LaunchTemplateID: lt.id, LaunchTemplateName: lt.name, VersionNumber: n}
		switch {
		case convErr != nil || n < 1 || n > len(lt.versions) || lt.versions[n-1] == nil:
			item.ResponseError = &deleteVersionErrorXML{Code: "launchTemplateVersionDoesNotExist", Message: "The specified launch template version does not exist."}
		case n == lt.defaultVersion:
			item.ResponseError = &deleteVersionErrorXML{Code: "launchTemplateVersionIsDefault", Message: "Cannot delete the default launch template version."}
		default:
			lt.versions[n-1] = nil
			out.Deleted.Items = append(out.Deleted.Items, item)
			continue
		}
		out.Unsuccessful.Items = append(out.Unsuccessful.Items, item)
	}
	return out, nil
}
