// Conversions between the domain's types (provision, release, store) and the API's wire types.
// The API keeps its own snake_case shapes so that the stored formats can change without breaking
// clients.
package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

func toProvisionResponse(res provision.Result) apiv1.ProvisionResponse {
	out := apiv1.ProvisionResponse{
		RunKey: res.RunKey, Label: res.Label, Status: res.Status, Outcome: res.Outcome, Error: redact(res.Error),
		Runners: make([]apiv1.Runner, 0, len(res.Runners)),
		Timing: apiv1.Timing{
			SelectMS: res.Timing.Select.Milliseconds(), StartMS: res.Timing.Start.Milliseconds(), CreateMS: res.Timing.Create.Milliseconds(),
			ValidateMS: res.Timing.Validate.Milliseconds(), PostMS: res.Timing.Post.Milliseconds(),
			TotalMS: res.Timing.Total.Milliseconds(),
		},
	}
	switch {
	case len(res.Labels) > 0:
		out.Labels = res.Labels // with the runner class's labels
	case res.Label != "":
		out.Labels = []string{res.Label, provision.RunnerLabel}
	}
	for _, r := range res.Runners {
		out.Runners = append(out.Runners, apiv1.Runner{
			InstanceID: r.InstanceID, InstanceType: r.InstanceType, UsageClass: r.UsageClass, Zone: r.Zone, Source: r.Source,
		})
	}
	for _, u := range res.Undone {
		out.Undone = append(out.Undone, apiv1.Undone{InstanceID: u.InstanceID, Action: u.Action, Reason: redact(u.Reason), Error: redact(u.Error)})
	}
	return out
}

func toProvisionRequest(p apiv1.ProvisionRequest) provision.Request {
	return provision.Request{
		Count: p.Count, UsageClass: p.UsageClass, InstanceTypes: p.AllowedInstanceTypes,
		ResourceClass: p.ResourceClass, CPU: p.CPU, MemoryMiB: p.MemoryMiB, RunnerClass: p.RunnerClass,
		AllowBurstable: p.AllowBurstable, FallbackToOnDemand: p.FallbackToOnDemand,
	}
}

func fromProvisionRequest(r provision.Request) apiv1.ProvisionRequest {
	return apiv1.ProvisionRequest{
		Count: r.Count, UsageClass: r.UsageClass, AllowedInstanceTypes: r.InstanceTypes,
		ResourceClass: r.ResourceClass, CPU: r.CPU, MemoryMiB: r.MemoryMiB, RunnerClass: r.RunnerClass,
		AllowBurstable: r.AllowBurstable, FallbackToOnDemand: r.FallbackToOnDemand,
	}
}

func toReleaseResponse(key string, rep release.Report, at time.Time) apiv1.ReleaseResponse {
	out := apiv1.ReleaseResponse{RunKey: key, Message: redact(rep.Message), Instances: []apiv1.ReleasedInstance{}, Counts: map[string]int{}, ReleasedAt: at}
	for _, in := range rep.Instances {
		out.Instances = append(out.Instances, apiv1.ReleasedInstance{
			InstanceID: in.ID, State: string(in.State), Outcome: string(in.Outcome), Reason: redact(in.Reason),
		})
		out.Counts[string(in.Outcome)]++
	}
	return out
}

// storedResult is the run record's result: the provision's, plus the releases the API appends.
// Unknown keys written by the provisioner are kept as they are.
type storedResult struct {
	fields map[string]json.RawMessage
}

const releasesKey = "releases"

// maxReleaseRecords bounds the releases kept on a run record (an item is at most 400 KB).
const maxReleaseRecords = 10

func parseStoredResult(b []byte) (storedResult, error) {
	s := storedResult{fields: map[string]json.RawMessage{}}
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s.fields); err != nil {
		return s, fmt.Errorf("run result: %w", err)
	}
	if s.fields == nil {
		s.fields = map[string]json.RawMessage{}
	}
	return s, nil
}

func (s storedResult) provision() (provision.Result, error) {
	b, err := json.Marshal(s.fields)
	if err != nil {
		return provision.Result{}, err
	}
	var res provision.Result
	err = json.Unmarshal(b, &res)
	return res, err
}

func (s storedResult) releases() []apiv1.ReleaseRecord {
	var out []apiv1.ReleaseRecord
	if raw, ok := s.fields[releasesKey]; ok {
		_ = json.Unmarshal(raw, &out)
	}
	return out
}

// publicReleases are the stored releases as a caller may see them (records written before
// answers were redacted may hold anything).
func publicReleases(recs []apiv1.ReleaseRecord) []apiv1.ReleaseRecord {
	for i := range recs {
		recs[i].Message = redact(recs[i].Message)
		for j := range recs[i].Instances {
			recs[i].Instances[j].Reason = redact(recs[i].Instances[j].Reason)
		}
	}
	return recs
}

func (s storedResult) withRelease(r apiv1.ReleaseRecord) ([]byte, error) {
	all := append(s.releases(), r)
	if len(all) > maxReleaseRecords {
		all = all[len(all)-maxReleaseRecords:]
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	s.fields[releasesKey] = raw
	return json.Marshal(s.fields)
}
