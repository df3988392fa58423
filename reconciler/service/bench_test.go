package service_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// awsCalls sums runnerpool_aws_calls_total of a replica.
func awsCalls(b *testing.B, svc *service.Service) float64 {
	b.Helper()
	families, err := svc.Metrics().Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "runnerpool_aws_calls_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// BenchmarkReuseCycle is one workflow's round trip through the API with a warm pool: provision one
// runner (reused from the pool: claim, registration by the simulated agent), then release it
// (deregistration signal, back in the pool). It reports the provision and release latency
// percentiles and the AWS calls per cycle (DynamoDB, SQS, EC2), against DynamoDB Local and fauxqs.
func BenchmarkReuseCycle(b *testing.B) {
	env := servicetest.New(b, servicetest.Options{})
	env.Fill(b, 1)
	r := env.Start(b, "bench", nil)
	var prov, rel []time.Duration
	run := 0
	calls0 := awsCalls(b, r.Service)
	for b.Loop() {
		run++
		tok := env.Token(b, fmt.Sprint(900000+run), nil)
		t0 := time.Now()
		code, body := servicetest.Call(b, http.MethodPost, r.URL+apiv1.PathProvision, tok, provisionBody(1))
		t1 := time.Now()
		if code != http.StatusOK {
			b.Fatalf("provision: %d %s", code, body)
		}
		if res := servicetest.Decode[apiv1.ProvisionResponse](b, body); res.Runners[0].Source != apiv1.SourceReused {
			b.Fatalf("runner %+v not reused", res.Runners[0])
		}
		code, body = servicetest.Call(b, http.MethodPost, r.URL+apiv1.PathRelease, tok, apiv1.ReleaseRequest{})
		if code != http.StatusOK || servicetest.Decode[apiv1.ReleaseResponse](b, body).Counts["pooled"] != 1 {
			b.Fatalf("release: %d %s", code, body)
		}
		prov, rel = append(prov, t1.Sub(t0)), append(rel, time.Since(t1))
	}
	b.ReportMetric((awsCalls(b, r.Service)-calls0)/float64(run), "aws-calls/cycle")
	for name, d := range map[string][]time.Duration{"provision": prov, "release": rel} {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*95/100].Microseconds())/1000, name+"-p95-ms")
	}
}
