// xml.go: the EC2 Query-protocol response shapes (element names checked against the
// aws-sdk-go-v2 service/ec2 deserializers, which are the authority for what a client can read)
// and the error envelope. EC2 lists are wrapper elements holding <item> members.
package ec2server

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

const (
	apiVersion   = "2016-11-15"
	xmlNamespace = "http://ec2.amazonaws.com/doc/2016-11-15/"
	// ec2TimeFormat is how EC2 writes timestamps (launchTime, createTime).
	ec2TimeFormat = "2006-01-02T15:04:05.000Z"
)

// apiError is an EC2 error answer. The SDK reads Code and Message from
// <Response><Errors><Error> and decides on retries from the code and the HTTP status.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func invalidValue(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "InvalidParameterValue", Message: fmt.Sprintf(format, args...)}
}

func missingParameter(name string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "MissingParameter", Message: "The request must contain the parameter " + name}
}

func invalidCombination(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "InvalidParameterCombination", Message: fmt.Sprintf(format, args...)}
}

type errorResponse struct {
	XMLName   xml.Name   `xml:"Response"`
	Errors    []errorXML `xml:"Errors>Error"`
	RequestID string     `xml:"RequestID"`
}

type errorXML struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func writeError(w http.ResponseWriter, requestID string, e *apiError) {
	status := e.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	body, _ := xml.Marshal(errorResponse{Errors: []errorXML{{Code: e.Code, Message: e.Message}}, RequestID: requestID})
	writeXML(w, status, body)
}

func writeXML(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(body)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}

// response is implemented by every success document through the embedded responseMeta.
type response interface{ setRequestID(string) }

type responseMeta struct {
	RequestID string `xml:"requestId"`
}

func (m *responseMeta) setRequestID(id string) { m.RequestID = id }

// items is an EC2 list: <fooSet><item>..</item><item>..</item></fooSet>.
type items[T any] struct {
	Items []T `xml:"item"`
}

func itemsOf[T any](v []T) *items[T] {
	if len(v) == 0 {
		return nil
	}
	return &items[T]{Items: v}
}

func ec2Time(t time.Time) string { return t.UTC().Format(ec2TimeFormat) }

// ---- instances ----

type tagXML struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type placementXML struct {
	AvailabilityZone string `xml:"availabilityZone"`
	GroupName        string `xml:"groupName"`
	Tenancy          string `xml:"tenancy"`
}

type groupXML struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName,omitempty"`
}

type stateReasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type iamProfileXML struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type monitoringXML struct {
	State string `xml:"state"`
}

type metadataOptionsXML struct {
	State                   string `xml:"state,omitempty"`
	HTTPTokens              string `xml:"httpTokens,omitempty"`
	HTTPPutResponseHopLimit int    `xml:"httpPutResponseHopLimit,omitempty"`
	HTTPEndpoint            string `xml:"httpEndpoint,omitempty"`
	InstanceMetadataTags    string `xml:"instanceMetadataTags,omitempty"`
}

type instanceXML struct {
	InstanceID            string                     `xml:"instanceId"`
	ImageID               string                     `xml:"imageId"`
	State                 stateXML                   `xml:"instanceState"`
	PrivateDNSName        string                     `xml:"privateDnsName"`
	DNSName               string                     `xml:"dnsName"`
	Reason                string                     `xml:"reason"`
	KeyName               string                     `xml:"keyName,omitempty"`
	AmiLaunchIndex        int                        `xml:"amiLaunchIndex"`
	InstanceType          string                     `xml:"instanceType"`
	LaunchTime            string                     `xml:"launchTime"`
	Placement             placementXML               `xml:"placement"`
	Monitoring            monitoringXML              `xml:"monitoring"`
	SubnetID              string                     `xml:"subnetId,omitempty"`
	VpcID                 string                     `xml:"vpcId,omitempty"`
	PrivateIPAddress      string                     `xml:"privateIpAddress,omitempty"`
	GroupSet              *items[groupXML]           `xml:"groupSet"`
	StateReason           *stateReasonXML            `xml:"stateReason"`
	Architecture          string                     `xml:"architecture"`
	RootDeviceType        string                     `xml:"rootDeviceType"`
	RootDeviceName        string                     `xml:"rootDeviceName"`
	InstanceLifecycle     string                     `xml:"instanceLifecycle,omitempty"`
	SpotInstanceRequestID string                     `xml:"spotInstanceRequestId,omitempty"`
	VirtualizationType    string                     `xml:"virtualizationType"`
	ClientToken           string                     `xml:"clientToken,omitempty"`
	TagSet                *items[tagXML]             `xml:"tagSet"`
	Hypervisor            string                     `xml:"hypervisor"`
	IamInstanceProfile    *iamProfileXML             `xml:"iamInstanceProfile"`
	EbsOptimized          bool                       `xml:"ebsOptimized"`
	MetadataOptions       *metadataOptionsXML        `xml:"metadataOptions"`
	BlockDeviceMapping    *items[instanceMappingXML] `xml:"blockDeviceMapping"`
}

type reservationXML struct {
	ReservationID string              `xml:"reservationId"`
	OwnerID       string              `xml:"ownerId"`
	GroupSet      items[groupXML]     `xml:"groupSet"`
	InstancesSet  items[*instanceXML] `xml:"instancesSet"`
}

type runInstancesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ RunInstancesResponse"`
	responseMeta
	reservationXML
}

type describeInstancesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstancesResponse"`
	responseMeta
	ReservationSet items[*reservationXML] `xml:"reservationSet"`
	NextToken      string                 `xml:"nextToken,omitempty"`
}

type stateChangeXML struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  stateXML `xml:"currentState"`
	PreviousState stateXML `xml:"previousState"`
}

// stateChangeResponse serves StartInstances, StopInstances and TerminateInstances; only the
// root element name differs.
type stateChangeResponse struct {
	XMLName xml.Name
	responseMeta
	InstancesSet items[stateChangeXML] `xml:"instancesSet"`
}

type returnResponse struct {
	XMLName xml.Name
	responseMeta
	Return bool `xml:"return"`
}

// ---- fleets ----

type fleetLaunchTemplateSpecXML struct {
	LaunchTemplateID   string `xml:"launchTemplateId,omitempty"`
	LaunchTemplateName string `xml:"launchTemplateName,omitempty"`
	Version            string `xml:"version,omitempty"`
}

type fleetOverridesXML struct {
	InstanceType     string `xml:"instanceType,omitempty"`
	SubnetID         string `xml:"subnetId,omitempty"`
	AvailabilityZone string `xml:"availabilityZone,omitempty"`
	ImageID          string `xml:"imageId,omitempty"`
	WeightedCapacity string `xml:"weightedCapacity,omitempty"`
	Priority         string `xml:"priority,omitempty"`
}

type launchTemplateAndOverridesXML struct {
	LaunchTemplateSpecification fleetLaunchTemplateSpecXML `xml:"launchTemplateSpecification"`
	Overrides                   fleetOverridesXML          `xml:"overrides"`
}

type fleetErrorXML struct {
	LaunchTemplateAndOverrides launchTemplateAndOverridesXML `xml:"launchTemplateAndOverrides"`
	Lifecycle                  string                        `xml:"lifecycle"`
	ErrorCode                  string                        `xml:"errorCode"`
	ErrorMessage               string                        `xml:"errorMessage"`
}

type fleetInstanceXML struct {
	LaunchTemplateAndOverrides launchTemplateAndOverridesXML `xml:"launchTemplateAndOverrides"`
	Lifecycle                  string                        `xml:"lifecycle"`
	InstanceIDs                items[string]                 `xml:"instanceIds"`
	InstanceType               string                        `xml:"instanceType"`
}

type createFleetResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ CreateFleetResponse"`
	responseMeta
	FleetID          string                  `xml:"fleetId"`
	ErrorSet         items[fleetErrorXML]    `xml:"errorSet"`
	FleetInstanceSet items[fleetInstanceXML] `xml:"fleetInstanceSet"`
}

// ---- launch templates ----

type launchTemplateXML struct {
	LaunchTemplateID     string         `xml:"launchTemplateId"`
	LaunchTemplateName   string         `xml:"launchTemplateName"`
	CreateTime           string         `xml:"createTime"`
	CreatedBy            string         `xml:"createdBy"`
	DefaultVersionNumber int            `xml:"defaultVersionNumber"`
	LatestVersionNumber  int            `xml:"latestVersionNumber"`
	TagSet               *items[tagXML] `xml:"tagSet"`
}

type ltIamXML struct {
	Arn  string `xml:"arn,omitempty"`
	Name string `xml:"name,omitempty"`
}

type ltTagSpecXML struct {
	ResourceType string        `xml:"resourceType"`
	TagSet       items[tagXML] `xml:"tagSet"`
}

type ltSpotOptionsXML struct {
	SpotInstanceType string `xml:"spotInstanceType,omitempty"`
}

type ltMarketOptionsXML struct {
	MarketType  string            `xml:"marketType"`
	SpotOptions *ltSpotOptionsXML `xml:"spotOptions"`
}

type ltDataXML struct {
	ImageID               string               `xml:"imageId,omitempty"`
	InstanceType          string               `xml:"instanceType,omitempty"`
	KeyName               string               `xml:"keyName,omitempty"`
	UserData              string               `xml:"userData,omitempty"`
	IamInstanceProfile    *ltIamXML            `xml:"iamInstanceProfile"`
	SecurityGroupIDs      *items[string]       `xml:"securityGroupIdSet"`
	SecurityGroups        *items[string]       `xml:"securityGroupSet"`
	TagSpecifications     *items[ltTagSpecXML] `xml:"tagSpecificationSet"`
	MetadataOptions       *metadataOptionsXML  `xml:"metadataOptions"`
	InstanceMarketOptions *ltMarketOptionsXML  `xml:"instanceMarketOptions"`
	BlockDeviceMappings   *items[ltMappingXML] `xml:"blockDeviceMappingSet"`
}

type ltMappingXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        struct {
		VolumeType          string `xml:"volumeType,omitempty"`
		VolumeSize          int    `xml:"volumeSize,omitempty"`
		Iops                int    `xml:"iops,omitempty"`
		Throughput          int    `xml:"throughput,omitempty"`
		DeleteOnTermination *bool  `xml:"deleteOnTermination"`
		Encrypted           bool   `xml:"encrypted,omitempty"`
	} `xml:"ebs"`
}

type launchTemplateVersionXML struct {
	LaunchTemplateID   string    `xml:"launchTemplateId"`
	LaunchTemplateName string    `xml:"launchTemplateName"`
	VersionNumber      int       `xml:"versionNumber"`
	VersionDescription string    `xml:"versionDescription,omitempty"`
	CreateTime         string    `xml:"createTime"`
	CreatedBy          string    `xml:"createdBy"`
	DefaultVersion     bool      `xml:"defaultVersion"`
	LaunchTemplateData ltDataXML `xml:"launchTemplateData"`
}

type launchTemplateResponse struct {
	XMLName xml.Name
	responseMeta
	LaunchTemplate launchTemplateXML `xml:"launchTemplate"`
}

type describeLaunchTemplatesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeLaunchTemplatesResponse"`
	responseMeta
	LaunchTemplates items[launchTemplateXML] `xml:"launchTemplates"`
	NextToken       string                   `xml:"nextToken,omitempty"`
}

type createLaunchTemplateVersionResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ CreateLaunchTemplateVersionResponse"`
	responseMeta
	LaunchTemplateVersion launchTemplateVersionXML `xml:"launchTemplateVersion"`
}

type describeLaunchTemplateVersionsResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeLaunchTemplateVersionsResponse"`
	responseMeta
	LaunchTemplateVersionSet items[launchTemplateVersionXML] `xml:"launchTemplateVersionSet"`
	NextToken                string                          `xml:"nextToken,omitempty"`
}

// ---- instance types ----

type vcpuInfoXML struct {
	DefaultVCpus          int `xml:"defaultVCpus"`
	DefaultCores          int `xml:"defaultCores"`
	DefaultThreadsPerCore int `xml:"defaultThreadsPerCore"`
}

type memoryInfoXML struct {
	SizeInMiB int `xml:"sizeInMiB"`
}

type processorInfoXML struct {
	SupportedArchitectures   items[string] `xml:"supportedArchitectures"`
	SustainedClockSpeedInGhz float64       `xml:"sustainedClockSpeedInGhz"`
	Manufacturer             string        `xml:"manufacturer"`
}

type instanceTypeInfoXML struct {
	InstanceType                  string           `xml:"instanceType"`
	CurrentGeneration             bool             `xml:"currentGeneration"`
	FreeTierEligible              bool             `xml:"freeTierEligible"`
	SupportedUsageClasses         items[string]    `xml:"supportedUsageClasses"`
	SupportedRootDeviceTypes      items[string]    `xml:"supportedRootDeviceTypes"`
	SupportedVirtualizationTypes  items[string]    `xml:"supportedVirtualizationTypes"`
	BareMetal                     bool             `xml:"bareMetal"`
	Hypervisor                    string           `xml:"hypervisor"`
	ProcessorInfo                 processorInfoXML `xml:"processorInfo"`
	VCpuInfo                      vcpuInfoXML      `xml:"vCpuInfo"`
	MemoryInfo                    memoryInfoXML    `xml:"memoryInfo"`
	InstanceStorageSupported      bool             `xml:"instanceStorageSupported"`
	HibernationSupported          bool             `xml:"hibernationSupported"`
	BurstablePerformanceSupported bool             `xml:"burstablePerformanceSupported"`
	DedicatedHostsSupported       bool             `xml:"dedicatedHostsSupported"`
	AutoRecoverySupported         bool             `xml:"autoRecoverySupported"`
}

type describeInstanceTypesResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceTypesResponse"`
	responseMeta
	InstanceTypeSet items[instanceTypeInfoXML] `xml:"instanceTypeSet"`
	NextToken       string                     `xml:"nextToken,omitempty"`
}

// rootName builds the namespaced root element for responses that share a Go type.
func rootName(action string) xml.Name {
	return xml.Name{Space: xmlNamespace, Local: action + "Response"}
}

type deleteLaunchTemplateVersionsResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DeleteLaunchTemplateVersionsResponse"`
	responseMeta
	Deleted      items[deletedVersionXML] `xml:"successfullyDeletedLaunchTemplateVersionSet"`
	Unsuccessful items[deletedVersionXML] `xml:"unsuccessfullyDeletedLaunchTemplateVersionSet"`
}

type deletedVersionXML struct {
	LaunchTemplateID   string                 `xml:"launchTemplateId"`
	LaunchTemplateName string                 `xml:"launchTemplateName"`
	VersionNumber      int                    `xml:"versionNumber"`
	ResponseError      *deleteVersionErrorXML `xml:"responseError"`
}

type deleteVersionErrorXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}
