// volumes.go: what an instance is launched with beyond its type: the image (DescribeImages, root
// device names), its EBS volumes (block device mappings from the image, the launch template and the
// request, merged by device name and checked against each volume type's limits; DescribeVolumes),
// and the resources EC2 refuses at launch when they do not exist (SetMissing: images, security
// groups, instance profiles).
package ec2server

import (
	"encoding/base64"
	"encoding/xml"
	"maps"
	"slices"
	"strings"
)

// defaultRootDevice and defaultRootGiB are an undeclared image's root device: Amazon Linux's.
const (
	defaultRootDevice = "/dev/xvda"
	defaultRootGiB    = 8
)

// blockDevice is one block device mapping (EBS only: the model has no instance store).
type blockDevice struct {
	deviceName          string
	volumeType          string
	sizeGiB, iops, tput int // 0: not given
	deleteOnTermination *bool
	encrypted           bool
}

// blockDevices reads BlockDeviceMapping.N under prefix.
func (p *params) blockDevices(prefix string) []blockDevice {
	var out []blockDevice
	for _, i := range p.indices(prefix + "BlockDeviceMapping") {
		bp := i + "."
		d := blockDevice{
			deviceName: p.str(bp + "DeviceName"), volumeType: p.str(bp + "Ebs.VolumeType"),
			sizeGiB: p.integer(bp+"Ebs.VolumeSize", 0), iops: p.integer(bp+"Ebs.Iops", 0), tput: p.integer(bp+"Ebs.Throughput", 0),
			encrypted: p.str(bp+"Ebs.Encrypted") == "true",
		}
		if p.has(bp + "Ebs.DeleteOnTermination") {
			v := p.str(bp+"Ebs.DeleteOnTermination") == "true"
			d.deleteOnTermination = &v
		}
		if d.deviceName == "" {
			p.fail(missingParameter(bp + "DeviceName"))
		}
		out = append(out, d)
	}
	return out
}

// mergeDevices overrides base's mappings with o's, device by device (EC2 merges an AMI's block
// device mappings with a launch's this way; a field the override leaves out keeps the base's).
func mergeDevices(base, o []blockDevice) []blockDevice {
	out := slices.Clone(base)
	for _, d := range o {
		i := slices.IndexFunc(out, func(b blockDevice) bool { return b.deviceName == d.deviceName })
		if i < 0 {
			out = append(out, d)
			continue
		}
		b := &out[i]
		if d.volumeType != "" {
			b.volumeType = d.volumeType
		}
		if d.sizeGiB != 0 {
			b.sizeGiB = d.sizeGiB
		}
		if d.iops != 0 {
			b.iops = d.iops
		}
		if d.tput != 0 {
			b.tput = d.tput
		}
		if d.deleteOnTermination != nil {
			b.deleteOnTermination = d.deleteOnTermination
		}
		b.encrypted = b.encrypted || d.encrypted
	}
	return out
}

// volumeLimits are EBS's documented limits per volume type: size in GiB, provisioned IOPS (0: the
// type takes none) and the IOPS per GiB ratio, throughput in MiB/s (gp3 only).
var volumeLimits = map[string]struct{ minGiB, maxGiB, minIOPS, maxIOPS, iopsPerGiB, minTput, maxTput int }{
	"gp3":      {1, 16384, 3000, 16000, 500, 125, 1000},
	"gp2":      {1, 16384, 0, 0, 0, 0, 0},
	"io1":      {4, 16384, 100, 64000, 50, 0, 0},
	"io2":      {4, 16384, 100, 256000, 1000, 0, 0},
	"st1":      {125, 16384, 0, 0, 0, 0, 0},
	"sc1":      {125, 16384, 0, 0, 0, 0, 0},
	"standard": {1, 1024, 0, 0, 0, 0, 0},
}

// checkDevices resolves defaults (gp3 at its baseline, deleted on termination) and refuses what
// EC2 refuses: an unknown volume type, a size, IOPS or throughput out of the type's range, IOPS on
// a type without provisioned IOPS, throughput on any type but gp3, a root volume smaller than its
// image's snapshot.
func checkDevices(devs []blockDevice, rootDevice string) ([]blockDevice, *apiError) {
	out := slices.Clone(devs)
	for i := range out {
		d := &out[i]
		if d.volumeType == "" {
			d.volumeType = "gp3"
		}
		lim, ok := volumeLimits[d.volumeType]
		if !ok {
			return nil, invalidValue("Value (%s) for parameter volumeType is invalid. Valid values are gp2, gp3, io1, io2, st1, sc1, standard.", d.volumeType)
		}
		if d.sizeGiB == 0 {
			d.sizeGiB = max(defaultRootGiB, lim.minGiB)
		}
		if d.deviceName == rootDevice && d.sizeGiB < defaultRootGiB {
			return nil, invalidValue("Volume of size %dGB is smaller than snapshot, expect size >= %dGB", d.sizeGiB, defaultRootGiB)
		}
		if d.sizeGiB < lim.minGiB || d.sizeGiB > lim.maxGiB {
			return nil, invalidValue("Volume size %d GiB is out of range for %s: %d to %d GiB.", d.sizeGiB, d.volumeType, lim.minGiB, lim.maxGiB)
		}
		switch {
		case d.iops != 0 && lim.maxIOPS == 0:
			return nil, invalidCombination("The parameter iops is not supported for %s volumes.", d.volumeType)
		case d.iops == 0 && lim.maxIOPS != 0:
			if d.volumeType != "gp3" {
				return nil, missingParameter("Iops (required for " + d.volumeType + " volumes)")
			}
			d.iops = lim.minIOPS
		case d.iops != 0 && (d.iops < lim.minIOPS || d.iops > lim.maxIOPS):
			return nil, invalidValue("Iops %d is out of range for %s: %d to %d.", d.iops, d.volumeType, lim.minIOPS, lim.maxIOPS)
		case d.iops > lim.minIOPS && d.iops > lim.iopsPerGiB*d.sizeGiB:
			return nil, invalidValue("Iops to volume size ratio of %d is too high; maximum is %d for %s.", d.iops/d.sizeGiB, lim.iopsPerGiB, d.volumeType)
		}
		switch {
		case d.tput != 0 && lim.maxTput == 0:
			return nil, invalidCombination("The parameter throughput is not supported for %s volumes.", d.volumeType)
		case d.tput == 0 && lim.maxTput != 0:
			d.tput = lim.minTput
		case d.tput != 0 && (d.tput < lim.minTput || d.tput > lim.maxTput):
			return nil, invalidValue("Throughput %d MiB/s is out of range for %s: %d to %d.", d.tput, d.volumeType, lim.minTput, lim.maxTput)
		case d.tput > lim.minTput && d.tput*4 > d.iops:
			return nil, invalidValue("Throughput (MiBps) to iops ratio of %.4f is too high; maximum is 0.25 MiBps per iops.", float64(d.tput)/float64(d.iops))
		}
		if d.deleteOnTermination == nil {
			yes := d.deviceName == rootDevice
			d.deleteOnTermination = &yes
		}
	}
	return out, nil
}

// image is what DescribeImages says of an image id.
type image struct {
	id, arch, rootDevice string
}

// imageLocked resolves an image id: declared with SetImage, or any well-formed id not SetMissing
// (the server does not make tests declare every AMI they name).
func (s *Server) imageLocked(id string) (image, *apiError) {
	if !strings.HasPrefix(id, "ami-") || len(id) < 5 || s.missing[id] {
		return image{}, &apiError{Status: 400, Code: "InvalidAMIID.NotFound", Message: "The image id '[" + id + "]' does not exist"}
	}
	arch, _ := s.imageArch(id)
	root := s.rootDevices[id]
	if root == "" {
		root = defaultRootDevice
	}
	return image{id: id, arch: arch, rootDevice: root}, nil
}

// checkLaunchResourcesLocked refuses a launch naming an image, security group or instance profile
// that does not exist, with EC2's error codes.
func (s *Server) checkLaunchResourcesLocked(imageID string, groups []string, profile string) *apiError {
	if _, err := s.imageLocked(imageID); err != nil {
		return err
	}
	for _, g := range groups {
		if !strings.HasPrefix(g, "sg-") {
			return &apiError{Status: 400, Code: "InvalidGroupId.Malformed", Message: "Invalid id: \"" + g + "\" (expecting \"sg-...\")"}
		}
		if s.missing[g] {
			return &apiError{Status: 400, Code: "InvalidGroup.NotFound", Message: "The security group '" + g + "' does not exist"}
		}
	}
	if profile != "" && s.missing[profile] {
		return invalidValue("Value (%s) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name", profile)
	}
	return nil
}

// resolveDevicesLocked is an instance's volumes: the image's root volume overridden by the launch's
// mappings, checked.
func (s *Server) resolveDevicesLocked(imageID string, launch []blockDevice) (string, []blockDevice, *apiError) {
	img, err := s.imageLocked(imageID)
	if err != nil {
		return "", nil, err
	}
	root := []blockDevice{{deviceName: img.rootDevice, volumeType: "gp3", sizeGiB: defaultRootGiB}}
	devs, err := checkDevices(mergeDevices(root, launch), img.rootDevice)
	return img.rootDevice, devs, err
}

// volume is one attached EBS volume of an instance.
type volume struct {
	blockDevice
	id string
}

func newVolumes(devs []blockDevice) []volume {
	out := make([]volume, len(devs))
	for i, d := range devs {
		out[i] = volume{blockDevice: d, id: "vol-" + randomHex(17)}
	}
	return out
}

type imageXML struct {
	ImageID            string                  `xml:"imageId"`
	ImageState         string                  `xml:"imageState"`
	Architecture       string                  `xml:"architecture"`
	ImageType          string                  `xml:"imageType"`
	RootDeviceType     string                  `xml:"rootDeviceType"`
	RootDeviceName     string                  `xml:"rootDeviceName"`
	VirtualizationType string                  `xml:"virtualizationType"`
	BlockDeviceMapping *items[imageMappingXML] `xml:"blockDeviceMapping"`
	TagSet             *items[tagXML]          `xml:"tagSet"`
}

type imageMappingXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        struct {
		SnapshotID          string `xml:"snapshotId"`
		VolumeSize          int    `xml:"volumeSize"`
		VolumeType          string `xml:"volumeType"`
		DeleteOnTermination bool   `xml:"deleteOnTermination"`
	} `xml:"ebs"`
}

type describeImagesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeImagesResponse"`
	responseMeta
	ImagesSet items[imageXML] `xml:"imagesSet"`
}

// describeImages answers for ImageId.N (an unknown id fails the call, as in EC2); without ids it
// lists the images declared with SetImage.
func (s *Server) describeImages(p *params) (response, *apiError) {
	ids := p.list("ImageId")
	if p.err != nil {
		return nil, p.err
	}
	if len(ids) == 0 {
		ids = slices.Sorted(maps.Keys(s.images))
	}
	out := &describeImagesResponse{}
	for _, id := range ids {
		img, err := s.imageLocked(id)
		if err != nil {
			return nil, err
		}
		m := imageMappingXML{DeviceName: img.rootDevice}
		m.Ebs.SnapshotID, m.Ebs.VolumeSize, m.Ebs.VolumeType, m.Ebs.DeleteOnTermination = "snap-"+randomHexFrom(id), defaultRootGiB, "gp3", true
		out.ImagesSet.Items = append(out.ImagesSet.Items, imageXML{
			ImageID: id, ImageState: "available", Architecture: img.arch, ImageType: "machine", RootDeviceType: "ebs",
			RootDeviceName: img.rootDevice, VirtualizationType: "hvm", BlockDeviceMapping: itemsOf([]imageMappingXML{m}),
			TagSet: itemsOf(tagsXML(s.imageTags[id])),
		})
	}
	return out, nil
}

type volumeXML struct {
	VolumeID         string                     `xml:"volumeId"`
	Size             int                        `xml:"size"`
	AvailabilityZone string                     `xml:"availabilityZone"`
	Status           string                     `xml:"status"`
	VolumeType       string                     `xml:"volumeType"`
	Iops             int                        `xml:"iops,omitempty"`
	Throughput       int                        `xml:"throughput,omitempty"`
	Encrypted        bool                       `xml:"encrypted"`
	AttachmentSet    items[volumeAttachmentXML] `xml:"attachmentSet"`
}

type volumeAttachmentXML struct {
	VolumeID            string `xml:"volumeId"`
	InstanceID          string `xml:"instanceId"`
	Device              string `xml:"device"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type describeVolumesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeVolumesResponse"`
	responseMeta
	VolumeSet items[volumeXML] `xml:"volumeSet"`
}

// describeVolumes lists the volumes of live instances, by VolumeId.N or the attachment.instance-id
// filter (what a test reads a launched instance's root volume back with).
func (s *Server) describeVolumes(p *params) (response, *apiError) {
	ids := p.list("VolumeId")
	filters := p.filters()
	if p.err != nil {
		return nil, p.err
	}
	for _, f := range filters {
		if f.name != "attachment.instance-id" && f.name != "volume-id" {
			return nil, invalidValue("The filter '%s' is invalid", f.name)
		}
	}
	out := &describeVolumesResponse{}
	for _, in := range s.sortedInstancesLocked() {
		if in.state == stateTerminated {
			continue
		}
		for _, v := range in.volumes {
			if len(ids) > 0 && !slices.Contains(ids, v.id) {
				continue
			}
			ok := true
			for _, f := range filters {
				val := map[string]string{"attachment.instance-id": in.id, "volume-id": v.id}[f.name]
				ok = ok && matchAny(f.values, []string{val})
			}
			if ok {
				out.VolumeSet.Items = append(out.VolumeSet.Items, v.xml(in))
			}
		}
	}
	return out, nil
}

func (v volume) xml(in *instance) volumeXML {
	return volumeXML{
		VolumeID: v.id, Size: v.sizeGiB, AvailabilityZone: in.zone, Status: "in-use", VolumeType: v.volumeType,
		Iops: v.iops, Throughput: v.tput, Encrypted: v.encrypted,
		AttachmentSet: items[volumeAttachmentXML]{Items: []volumeAttachmentXML{{
			VolumeID: v.id, InstanceID: in.id, Device: v.deviceName, Status: "attached", DeleteOnTermination: *v.deleteOnTermination,
		}}},
	}
}

type instanceMappingXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        struct {
		VolumeID            string `xml:"volumeId"`
		Status              string `xml:"status"`
		AttachTime          string `xml:"attachTime"`
		DeleteOnTermination bool   `xml:"deleteOnTermination"`
	} `xml:"ebs"`
}

// mappingsXML is DescribeInstances' blockDeviceMapping: device names and volume ids (the volumes'
// type, size, IOPS and throughput are DescribeVolumes', as in EC2).
func (in *instance) mappingsXML() *items[instanceMappingXML] {
	var out []instanceMappingXML
	for _, v := range in.volumes {
		m := instanceMappingXML{DeviceName: v.deviceName}
		m.Ebs.VolumeID, m.Ebs.Status, m.Ebs.AttachTime, m.Ebs.DeleteOnTermination = v.id, "attached", ec2Time(in.launchTime), *v.deleteOnTermination
		out = append(out, m)
	}
	return itemsOf(out)
}

// SetMissing makes ids (images, security groups, instance profile names or ARNs) unknown to EC2:
// a launch naming one fails as in EC2, and DescribeImages does not find it.
func (s *Server) SetMissing(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.missing[id] = true
	}
}

// SetImageTags sets an image's tags, as CreateTags on an AMI does (a prepared image's
// runnerpool:job-access and runnerpool:runner-version, images/packer); DescribeImages answers them in
// tagSet.
func (s *Server) SetImageTags(imageID string, tags map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imageTags[imageID] = maps.Clone(tags)
}

// SetRootDevice declares an image's root device name (default /dev/xvda).
func (s *Server) SetRootDevice(imageID, device string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rootDevices[imageID] = device
}

// VolumeView is a read-only snapshot of one of an instance's volumes, for tests.
type VolumeView struct {
	ID, DeviceName, VolumeType     string
	SizeGiB, IOPS, ThroughputMiBps int
	DeleteOnTermination            bool
}

func volumeViews(vs []volume) []VolumeView {
	out := make([]VolumeView, len(vs))
	for i, v := range vs {
		out[i] = VolumeView{ID: v.id, DeviceName: v.deviceName, VolumeType: v.volumeType, SizeGiB: v.sizeGiB,
			IOPS: v.iops, ThroughputMiBps: v.tput, DeleteOnTermination: *v.deleteOnTermination}
	}
	return out
}

type describeInstanceAttributeResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceAttributeResponse"`
	responseMeta
	InstanceID string `xml:"instanceId"`
	UserData   *struct {
		Value string `xml:"value,omitempty"`
	} `xml:"userData"`
}

// describeInstanceAttribute answers the userData attribute (base64, as EC2 returns it): where EC2
// reads an instance's user data back; DescribeInstances does not carry it.
func (s *Server) describeInstanceAttribute(p *params) (response, *apiError) {
	id, attr := p.required("InstanceId"), p.required("Attribute")
	if p.err != nil {
		return nil, p.err
	}
	if attr != "userData" {
		return nil, invalidValue("The attribute '%s' is not supported by this server; userData is.", attr)
	}
	insts, err := s.lookupInstancesLocked([]string{id})
	if err != nil {
		return nil, err
	}
	out := &describeInstanceAttributeResponse{InstanceID: id, UserData: &struct {
		Value string `xml:"value,omitempty"`
	}{}}
	if ud := insts[0].userData; ud != "" {
		out.UserData.Value = base64.StdEncoding.EncodeToString([]byte(ud))
	}
	return out, nil
}
