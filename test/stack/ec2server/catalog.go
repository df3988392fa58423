// catalog.go: the built-in catalogue of instance types (shapes and us-east-1 on-demand prices
// of real types), DescribeInstanceTypes, and attribute-based instance type selection
// (InstanceRequirements), which CreateFleet uses to expand an override into concrete types.
package ec2server

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

type instanceTypeInfo struct {
	Name         string
	VCPUs        int
	MemoryMiB    int
	Arch         string // "x86_64" or "arm64"
	Burstable    bool
	Manufacturer string // "intel", "amd", "amazon-web-services"
	ClockGHz     float64
	Price        float64 // on-demand USD per hour; orders attribute-based selections
}

// catalog holds the types, sorted by name; catalogByName indexes it.
var catalog, catalogByName = buildCatalog()

func buildCatalog() ([]*instanceTypeInfo, map[string]*instanceTypeInfo) {
	type size struct {
		name  string
		vcpus int
		mem   int
	}
	burstable := []size{{"nano", 2, 512}, {"micro", 2, 1024}, {"small", 2, 2048}, {"medium", 2, 4096},
		{"large", 2, 8192}, {"xlarge", 4, 16384}, {"2xlarge", 8, 32768}}
	general := func(memPerVCPU int, sizes ...string) []size {
		vcpus := map[string]int{"large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16}
		var out []size
		for _, s := range sizes {
			out = append(out, size{s, vcpus[s], vcpus[s] * memPerVCPU})
		}
		return out
	}
	families := []struct {
		name, arch, manufacturer string
		burstable                bool
		clock, basePrice         float64 // basePrice is the smallest size's price; each size doubles
		sizes                    []size
	}{
		{"t3", "x86_64", "intel", true, 3.1, 0.0052, burstable},
		{"t4g", "arm64", "amazon-web-services", true, 2.5, 0.0042, burstable},
		{"c5", "x86_64", "intel", false, 3.4, 0.085, general(2048, "large", "xlarge", "2xlarge", "4xlarge")},
		{"c6i", "x86_64", "intel", false, 3.5, 0.085, general(2048, "large", "xlarge", "2xlarge", "4xlarge")},
		{"c7g", "arm64", "amazon-web-services", false, 2.6, 0.0725, general(2048, "large", "xlarge", "2xlarge", "4xlarge")},
		{"m5", "x86_64", "intel", false, 3.1, 0.096, general(4096, "large", "xlarge", "2xlarge", "4xlarge")},
		{"m6i", "x86_64", "intel", false, 3.5, 0.096, general(4096, "large", "xlarge", "2xlarge", "4xlarge")},
		{"m7g", "arm64", "amazon-web-services", false, 2.6, 0.0816, general(4096, "large", "xlarge", "2xlarge", "4xlarge")},
		{"r6i", "x86_64", "intel", false, 3.5, 0.126, general(8192, "large", "xlarge", "2xlarge")},
	}
	var all []*instanceTypeInfo
	for _, f := range families {
		price := f.basePrice
		for _, s := range f.sizes {
			all = append(all, &instanceTypeInfo{
				Name: f.name + "." + s.name, VCPUs: s.vcpus, MemoryMiB: s.mem, Arch: f.arch,
				Burstable: f.burstable, Manufacturer: f.manufacturer, ClockGHz: f.clock, Price: price,
			})
			price *= 2
		}
	}
	slices.SortFunc(all, func(a, b *instanceTypeInfo) int { return strings.Compare(a.Name, b.Name) })
	byName := make(map[string]*instanceTypeInfo, len(all))
	for _, t := range all {
		byName[t.Name] = t
	}
	return all, byName
}

func (t *instanceTypeInfo) xml() instanceTypeInfoXML {
	cores, threads := t.VCPUs, 1
	if t.Arch == "x86_64" {
		cores, threads = t.VCPUs/2, 2
	}
	return instanceTypeInfoXML{
		InstanceType:                  t.Name,
		CurrentGeneration:             true,
		FreeTierEligible:              t.Name == "t3.micro",
		SupportedUsageClasses:         items[string]{Items: []string{"on-demand", "spot"}},
		SupportedRootDeviceTypes:      items[string]{Items: []string{"ebs"}},
		SupportedVirtualizationTypes:  items[string]{Items: []string{"hvm"}},
		Hypervisor:                    "nitro",
		ProcessorInfo:                 processorInfoXML{SupportedArchitectures: items[string]{Items: []string{t.Arch}}, SustainedClockSpeedInGhz: t.ClockGHz, Manufacturer: t.Manufacturer},
		VCpuInfo:                      vcpuInfoXML{DefaultVCpus: t.VCPUs, DefaultCores: cores, DefaultThreadsPerCore: threads},
		MemoryInfo:                    memoryInfoXML{SizeInMiB: t.MemoryMiB},
		HibernationSupported:          t.Arch == "x86_64",
		BurstablePerformanceSupported: t.Burstable,
		AutoRecoverySupported:         true,
		DedicatedHostsSupported:       !t.Burstable,
	}
}

// typeFilterValues gives the values a DescribeInstanceTypes filter compares against.
func typeFilterValues(t *instanceTypeInfo, name string) ([]string, bool) {
	switch name {
	case "instance-type":
		return []string{t.Name}, true
	case "processor-info.supported-architecture":
		return []string{t.Arch}, true
	case "burstable-performance-supported":
		return []string{strconv.FormatBool(t.Burstable)}, true
	case "current-generation":
		return []string{"true"}, true
	case "free-tier-eligible":
		return []string{strconv.FormatBool(t.Name == "t3.micro")}, true
	case "vcpu-info.default-vcpus":
		return []string{strconv.Itoa(t.VCPUs)}, true
	case "memory-info.size-in-mib":
		return []string{strconv.Itoa(t.MemoryMiB)}, true
	case "supported-usage-class":
		return []string{"on-demand", "spot"}, true
	case "hypervisor":
		return []string{"nitro"}, true
	case "bare-metal":
		return []string{"false"}, true
	case "processor-info.manufacturer":
		return []string{t.Manufacturer}, true
	}
	return nil, false
}

func (s *Server) describeInstanceTypes(p *params) (response, *apiError) {
	names := p.list("InstanceType")
	filters := p.filters()
	max, after, _ := p.paging(5, 100)
	if p.err != nil {
		return nil, p.err
	}
	var unknown []string
	for _, n := range names {
		if catalogByName[n] == nil {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return nil, &apiError{Status: 400, Code: "InvalidInstanceType",
			Message: "The following supplied instance types do not exist: [" + strings.Join(unknown, ", ") + "]"}
	}
	for _, f := range filters {
		if _, ok := typeFilterValues(catalog[0], f.name); !ok {
			return nil, invalidValue("The filter '%s' is invalid", f.name)
		}
	}
	var matched []*instanceTypeInfo
	for _, t := range catalog {
		if len(names) > 0 && !slices.Contains(names, t.Name) {
			continue
		}
		ok := true
		for _, f := range filters {
			vals, _ := typeFilterValues(t, f.name)
			if !matchAny(f.values, vals) {
				ok = false
				break
			}
		}
		if ok {
			matched = append(matched, t)
		}
	}
	out := &describeInstanceTypesResponse{}
	start := len(matched)
	if after < uint64(len(matched)) {
		start = int(after)
	}
	end := len(matched)
	if max > 0 && start+max < end {
		end = start + max
		out.NextToken = pageToken(uint64(end))
	}
	for _, t := range matched[start:end] {
		out.InstanceTypeSet.Items = append(out.InstanceTypeSet.Items, t.xml())
	}
	return out, nil
}

// instanceRequirements is the attribute-based selection of an override (a subset of EC2's
// InstanceRequirementsRequest: the attributes that distinguish the catalogue's types).
type instanceRequirements struct {
	vcpuMin, vcpuMax             int // max 0: no upper bound
	memMin, memMax               int
	memPerVCPUMin, memPerVCPUMax float64
	allowed, excluded            []string
	burstable                    string // included | excluded | required (EC2's default: excluded)
	manufacturers                []string
	generations                  []string
	bareMetal                    string
}

func (p *params) requirements(prefix string) *instanceRequirements {
	if !p.hasPrefix(prefix) {
		return nil
	}
	pre := prefix + "."
	r := &instanceRequirements{
		vcpuMin:       p.integer(pre+"VCpuCount.Min", 0),
		vcpuMax:       p.integer(pre+"VCpuCount.Max", 0),
		memMin:        p.integer(pre+"MemoryMiB.Min", 0),
		memMax:        p.integer(pre+"MemoryMiB.Max", 0),
		memPerVCPUMin: p.number(pre+"MemoryGiBPerVCpu.Min", 0),
		memPerVCPUMax: p.number(pre+"MemoryGiBPerVCpu.Max", 0),
		allowed:       p.list(pre + "AllowedInstanceType"),
		excluded:      p.list(pre + "ExcludedInstanceType"),
		burstable:     p.str(pre + "BurstablePerformance"),
		manufacturers: p.list(pre + "CpuManufacturer"),
		generations:   p.list(pre + "InstanceGeneration"),
		bareMetal:     p.str(pre + "BareMetal"),
	}
	// EC2 requires both ranges' minimums on every InstanceRequirements.
	if !p.has(pre + "VCpuCount.Min") {
		p.fail(missingParameter(pre + "VCpuCount.Min"))
	}
	if !p.has(pre + "MemoryMiB.Min") {
		p.fail(missingParameter(pre + "MemoryMiB.Min"))
	}
	if len(r.allowed) > 0 && len(r.excluded) > 0 {
		p.fail(invalidCombination("AllowedInstanceTypes and ExcludedInstanceTypes cannot be specified together."))
	}
	switch r.burstable {
	case "":
		r.burstable = "excluded"
	case "included", "excluded", "required":
	default:
		p.fail(invalidValue("Invalid value '%s' for BurstablePerformance.", r.burstable))
	}
	if r.vcpuMin < 0 || r.memMin < 0 || (r.vcpuMax > 0 && r.vcpuMax < r.vcpuMin) || (r.memMax > 0 && r.memMax < r.memMin) {
		p.fail(invalidValue("The InstanceRequirements ranges are invalid: a maximum is below its minimum."))
	}
	return r
}

func (r *instanceRequirements) matches(t *instanceTypeInfo) bool {
	if t.VCPUs < r.vcpuMin || (r.vcpuMax > 0 && t.VCPUs > r.vcpuMax) {
		return false
	}
	if t.MemoryMiB < r.memMin || (r.memMax > 0 && t.MemoryMiB > r.memMax) {
		return false
	}
	perVCPU := float64(t.MemoryMiB) / 1024 / float64(t.VCPUs)
	if perVCPU < r.memPerVCPUMin || (r.memPerVCPUMax > 0 && perVCPU > r.memPerVCPUMax) {
		return false
	}
	if len(r.allowed) > 0 && !matchAny(r.allowed, []string{t.Name}) {
		return false
	}
	if len(r.excluded) > 0 && matchAny(r.excluded, []string{t.Name}) {
		return false
	}
	switch r.burstable {
	case "excluded":
		if t.Burstable {
			return false
		}
	case "required":
		if !t.Burstable {
			return false
		}
	}
	if len(r.manufacturers) > 0 && !slices.Contains(r.manufacturers, t.Manufacturer) {
		return false
	}
	if len(r.generations) > 0 && !slices.Contains(r.generations, "current") {
		return false // every catalogue type is current generation
	}
	return r.bareMetal != "required" // and none is bare metal
}

// selectTypes returns the catalogue types matching r for an image of the given architecture,
// cheapest first (the lowest-price / price-capacity-optimized order, approximately).
func selectTypes(r *instanceRequirements, arch string) []*instanceTypeInfo {
	var out []*instanceTypeInfo
	for _, t := range catalog {
		if t.Arch == arch && r.matches(t) {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b *instanceTypeInfo) int { return cmp.Compare(a.Price, b.Price) })
	return out
}
