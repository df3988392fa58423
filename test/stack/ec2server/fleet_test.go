// fleet_test.go: CreateFleet (instant) through the SDK: explicit and attribute-based overrides,
// spread across subnets, on-demand/spot split, capacity units, priorities, minimum target
// capacity, and partial fulfilment reported as launched instances plus errors.
package ec2server

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
)

// fleetResult flattens a CreateFleet answer for comparison.
type fleetResult struct {
	Launched map[string]int // "lifecycle type subnet" -> count
	Errors   []string       // "code lifecycle type subnet"
}

func summarise(out *ec2.CreateFleetOutput) fleetResult {
	r := fleetResult{Launched: map[string]int{}}
	for _, in := range out.Instances {
		ov := in.LaunchTemplateAndOverrides.Overrides
		r.Launched[string(in.Lifecycle)+" "+string(in.InstanceType)+" "+aws.ToString(ov.SubnetId)] += len(in.InstanceIds)
	}
	for _, e := range out.Errors {
		ov := e.LaunchTemplateAndOverrides.Overrides
		r.Errors = append(r.Errors, aws.ToString(e.ErrorCode)+" "+string(e.Lifecycle)+" "+string(ov.InstanceType)+" "+aws.ToString(ov.SubnetId))
	}
	slices.Sort(r.Errors)
	return r
}

func TestCreateFleet(t *testing.T) {
	t.Parallel()
	explicit := []types.FleetLaunchTemplateOverridesRequest{
		{InstanceType: types.InstanceTypeT3Micro, SubnetId: aws.String("subnet-a")},
		{InstanceType: types.InstanceTypeT3Micro, SubnetId: aws.String("subnet-b")},
		{InstanceType: types.InstanceTypeT3Small, SubnetId: aws.String("subnet-a")},
	}
	abs := []types.FleetLaunchTemplateOverridesRequest{{SubnetId: aws.String("subnet-a"), InstanceRequirements: &types.InstanceRequirementsRequest{
		VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(2), Max: aws.Int32(2)}, MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(4096)},
		AllowedInstanceTypes: []string{"c*", "m*"},
	}}}
	target := func(total int32, def types.DefaultTargetCapacityType) *types.TargetCapacitySpecificationRequest {
		return &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(total), DefaultTargetCapacityType: def}
	}
	tests := []struct {
		name      string
		overrides []types.FleetLaunchTemplateOverridesRequest
		setup     func(s *Server)
		mod       func(in *ec2.CreateFleetInput)
		want      fleetResult
		wantCode  string
	}{
		{
			name: "spread across the subnets of the first type", overrides: explicit,
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(4, types.DefaultTargetCapacityTypeOnDemand)
			},
			want: fleetResult{Launched: map[string]int{"on-demand t3.micro subnet-a": 2, "on-demand t3.micro subnet-b": 2}},
		},
		{
			name: "partial capacity: launched plus InsufficientInstanceCapacity", overrides: explicit,
			setup: func(s *Server) { s.SetCapacity("t3.micro", "", 1); s.SetCapacity("t3.small", "", 1) },
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(4, types.DefaultTargetCapacityTypeOnDemand)
			},
			want: fleetResult{
				Launched: map[string]int{"on-demand t3.micro subnet-a": 1, "on-demand t3.small subnet-a": 1},
				Errors: []string{
					"InsufficientInstanceCapacity on-demand t3.micro subnet-a",
					"InsufficientInstanceCapacity on-demand t3.micro subnet-b",
					"InsufficientInstanceCapacity on-demand t3.small subnet-a",
				},
			},
		},
		{
			name: "no capacity at all", overrides: explicit[:1],
			setup: func(s *Server) { s.SetCapacity("", "us-east-1a", 0) },
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(2, types.DefaultTargetCapacityTypeSpot)
			},
			want: fleetResult{Launched: map[string]int{}, Errors: []string{"InsufficientInstanceCapacity spot t3.micro subnet-a"}},
		},
		{
			name: "attribute-based, cheapest type first, spot", overrides: abs,
			setup: func(s *Server) { s.SetCapacity("c5.large", "", 1) },
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(3, types.DefaultTargetCapacityTypeSpot)
			},
			want: fleetResult{
				Launched: map[string]int{"spot c5.large subnet-a": 1, "spot c6i.large subnet-a": 2},
				Errors:   []string{"InsufficientInstanceCapacity spot c5.large subnet-a"},
			},
		},
		{
			name: "on-demand and spot split", overrides: explicit[:1],
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(3, types.DefaultTargetCapacityTypeSpot)
				in.TargetCapacitySpecification.OnDemandTargetCapacity = aws.Int32(1)
			},
			want: fleetResult{Launched: map[string]int{"on-demand t3.micro subnet-a": 1, "spot t3.micro subnet-a": 2}},
		},
		{
			name: "vcpu capacity units", overrides: []types.FleetLaunchTemplateOverridesRequest{{InstanceType: types.InstanceTypeC6iXlarge, SubnetId: aws.String("subnet-a")}},
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(8, types.DefaultTargetCapacityTypeOnDemand)
				in.TargetCapacitySpecification.TargetCapacityUnitType = types.TargetCapacityUnitTypeVcpu
			},
			want: fleetResult{Launched: map[string]int{"on-demand c6i.xlarge subnet-a": 2}},
		},
		{
			name: "prioritized on-demand", overrides: []types.FleetLaunchTemplateOverridesRequest{
				{InstanceType: types.InstanceTypeT3Micro, SubnetId: aws.String("subnet-a"), Priority: aws.Float64(2)},
				{InstanceType: types.InstanceTypeT3Small, SubnetId: aws.String("subnet-a"), Priority: aws.Float64(1)},
			},
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
				in.OnDemandOptions = &types.OnDemandOptionsRequest{AllocationStrategy: types.FleetOnDemandAllocationStrategyPrioritized}
			},
			want: fleetResult{Launched: map[string]int{"on-demand t3.small subnet-a": 1}},
		},
		{
			name: "below minimum target capacity launches nothing", overrides: explicit[:1],
			setup: func(s *Server) { s.SetCapacity("t3.micro", "", 2) },
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(3, types.DefaultTargetCapacityTypeOnDemand)
				in.OnDemandOptions = &types.OnDemandOptionsRequest{MinTargetCapacity: aws.Int32(3), SingleInstanceType: aws.Bool(true)}
			},
			want: fleetResult{Launched: map[string]int{}, Errors: []string{"InsufficientInstanceCapacity on-demand t3.micro subnet-a"}},
		},
		{
			name: "maintain fleets are refused", overrides: explicit,
			mod: func(in *ec2.CreateFleetInput) {
				in.Type = types.FleetTypeMaintain
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
			},
			wantCode: "InvalidParameterValue",
		},
		{
			// FleetLaunchTemplateSpecificationRequest: "You must specify a value, otherwise the
			// request fails" (RunInstances, by contrast, takes the default version).
			name: "no launch template version", overrides: explicit[:1],
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
				in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.Version = nil
			},
			wantCode: "MissingParameter",
		},
		{
			name: "unknown launch template version", overrides: explicit[:1],
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
				in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.Version = aws.String("7")
			},
			wantCode: "InvalidLaunchTemplateId.VersionNotFound",
		},
		{
			name: "malformed launch template version", overrides: explicit[:1],
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
				in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.Version = aws.String("latest")
			},
			wantCode: "InvalidParameterValue",
		},
		{
			name: "InstanceType with InstanceRequirements", overrides: []types.FleetLaunchTemplateOverridesRequest{{
				InstanceType: types.InstanceTypeT3Micro, InstanceRequirements: abs[0].InstanceRequirements}},
			mod: func(in *ec2.CreateFleetInput) {
				in.TargetCapacitySpecification = target(1, types.DefaultTargetCapacityTypeOnDemand)
			},
			wantCode: "InvalidParameterCombination",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s, c, _ := newTestServer(t, Options{})
			s.SetSubnet("subnet-a", "us-east-1a")
			s.SetSubnet("subnet-b", "us-east-1b")
			if tt.setup != nil {
				tt.setup(s)
			}
			ltID := createTemplate(t, ctx, c, "fleet-lt")
			in := &ec2.CreateFleetInput{
				Type: types.FleetTypeInstant,
				LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
					LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateId: aws.String(ltID), Version: aws.String("$Latest")},
					Overrides:                   tt.overrides,
				}},
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance,
					Tags: []types.Tag{{Key: aws.String("runnerpool:run"), Value: aws.String("42")}}}},
			}
			tt.mod(in)
			out, err := c.CreateFleet(ctx, in)
			if apiCode(err) != tt.wantCode {
				t.Fatalf("err = %v, want code %q", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, summarise(out)); diff != "" {
				t.Errorf("fleet result (-want +got):\n%s", diff)
			}
			fleetID := aws.ToString(out.FleetId)
			for _, fi := range out.Instances {
				if spec := fi.LaunchTemplateAndOverrides.LaunchTemplateSpecification; aws.ToString(spec.LaunchTemplateId) != ltID || aws.ToString(spec.Version) != "$Latest" {
					t.Errorf("launch template spec = %+v", spec)
				}
				for _, id := range fi.InstanceIds {
					v, ok := s.Instance(id)
					if !ok || v.FleetID != fleetID || v.Tags["runnerpool:run"] != "42" || v.Tags["aws:ec2:fleet-id"] != fleetID ||
						v.Lifecycle != string(fi.Lifecycle) || v.InstanceType != string(fi.InstanceType) || v.ImageID != "ami-0fleet0000000000" {
						t.Errorf("instance %s = %+v (fleet %s)", id, v, fleetID)
					}
				}
			}
			for _, e := range out.Errors {
				if aws.ToString(e.ErrorMessage) == "" || aws.ToString(e.LaunchTemplateAndOverrides.Overrides.AvailabilityZone) == "" {
					t.Errorf("error item lacks message or zone: %+v", e)
				}
			}
		})
	}
}

func createTemplate(t *testing.T, ctx context.Context, c *ec2.Client, name string) string {
	t.Helper()
	out, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(name),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-0fleet0000000000")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.LaunchTemplate.LaunchTemplateId)
}
