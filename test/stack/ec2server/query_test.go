// query_test.go: hand-made and hostile requests (no SDK): every malformed query gets an
// AWS-shaped XML error with the right status and code, never a panic; plus FuzzQuery and unit
// tests of the parameter and wildcard helpers.
package ec2server

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type wireError struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

func TestMalformedQueries(t *testing.T) {
	t.Parallel()
	_, _, url := newTestServer(t, Options{})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
	}{
		{"empty body", "", 400, "MissingAction"},
		{"garbage", "\x00\xff%%%garbage", 400, "MalformedQueryString"},
		{"no action", "Version=2016-11-15&InstanceId.1=i-12345678", 400, "MissingAction"},
		{"unknown action", "Action=LaunchRockets&Version=2016-11-15", 400, "InvalidAction"},
		{"wrong version", "Action=DescribeInstances&Version=2014-01-01", 400, "InvalidParameterValue"},
		{"bad int", "Action=RunInstances&ImageId=ami-1&MinCount=one&MaxCount=1", 400, "InvalidParameterValue"},
		{"missing counts", "Action=RunInstances&ImageId=ami-1", 400, "MissingParameter"},
		{"count overflows", "Action=RunInstances&ImageId=ami-1&MinCount=99999999999999999999&MaxCount=1", 400, "InvalidParameterValue"},
		{"over the instance limit", "Action=RunInstances&ImageId=ami-1&MinCount=100000&MaxCount=100000", 400, "InstanceLimitExceeded"},
		{"bad MaxResults", "Action=DescribeInstances&MaxResults=ten", 400, "InvalidParameterValue"},
		{"bad instance id", "Action=TerminateInstances&InstanceId.1=xyz", 400, "InvalidInstanceID.Malformed"},
		{"unknown instance id", "Action=StopInstances&InstanceId.1=i-0123456789abcdef0", 400, "InvalidInstanceID.NotFound"},
		{"no instance ids", "Action=StartInstances", 400, "MissingParameter"},
		{"filter without name", "Action=DescribeInstances&Filter.1.Value.1=x", 400, "MissingParameter"},
		{"fleet without configs", "Action=CreateFleet&Type=instant&TargetCapacitySpecification.TotalTargetCapacity=1", 400, "MissingParameter"},
		{"fleet without target", "Action=CreateFleet&Type=instant&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName=x", 400, "MissingParameter"},
		{"fleet of default type", "Action=CreateFleet&TargetCapacitySpecification.TotalTargetCapacity=1", 400, "InvalidParameterValue"},
		{"fleet unknown template", "Action=CreateFleet&Type=instant&TargetCapacitySpecification.TotalTargetCapacity=1&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName=nope", 400, "InvalidLaunchTemplateName.NotFoundException"},
		{"tags without tags", "Action=CreateTags&ResourceId.1=i-12345678", 400, "MissingParameter"},
		{"template id malformed", "Action=DeleteLaunchTemplate&LaunchTemplateId=template", 400, "InvalidLaunchTemplateId.Malformed"},
		{"tag on bad id", "Action=CreateTags&ResourceId.1=nodash&Tag.1.Key=a&Tag.1.Value=b", 400, "InvalidID"},
		{"tag key too long", "Action=CreateTags&ResourceId.1=i-12345678&Tag.1.Key=" + strings.Repeat("k", 129), 400, "InvalidParameterValue"},
		{"unknown instance type filter", "Action=DescribeInstanceTypes&Filter.1.Name=colour&Filter.1.Value.1=x", 400, "InvalidParameterValue"},
		{"instance types MaxResults", "Action=DescribeInstanceTypes&MaxResults=101", 400, "InvalidParameterValue"},
		{"versions without template", "Action=DescribeLaunchTemplateVersions&LaunchTemplateVersion.1=3", 400, "InvalidParameterCombination"},
		{"modify unknown template", "Action=ModifyLaunchTemplate&LaunchTemplateName=nope&SetDefaultVersion=1", 400, "InvalidLaunchTemplateName.NotFoundException"},
		{"template by id and name", "Action=DeleteLaunchTemplate&LaunchTemplateName=a&LaunchTemplateId=lt-12345678", 400, "InvalidParameterCombination"},
		{"MaxResults at the minimum", "Action=DescribeInstances&MaxResults=5", 200, ""},
		{"DryRun is ignored", "Action=DescribeInstanceTypes&MaxResults=5&DryRun=true", 200, ""},
		{"non-contiguous list indices", "Action=DescribeInstanceTypes&InstanceType.7=t3.micro&InstanceType.3=c5.large", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantCode == "" {
				return
			}
			var we wireError
			if err := xml.Unmarshal(body, &we); err != nil {
				t.Fatalf("error body is not the EC2 error XML: %v\n%s", err, body)
			}
			if we.Code != tt.wantCode || we.Message == "" || we.RequestID == "" {
				t.Errorf("error = %+v, want code %s with a message and request id", we, tt.wantCode)
			}
		})
	}
}

// TestPostFormResponseShape checks the raw success XML (namespace, requestId, <item> lists).
func TestPostFormResponseShape(t *testing.T) {
	t.Parallel()
	_, _, u := newTestServer(t, Options{})
	resp, err := http.PostForm(u, url.Values{"Action": {"DescribeInstanceTypes"}, "Version": {apiVersion}, "InstanceType.1": {"t3.micro"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`<DescribeInstanceTypesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">`,
		`<requestId>`, `<instanceTypeSet><item><instanceType>t3.micro</instanceType>`,
		`<supportedArchitectures><item>x86_64</item></supportedArchitectures>`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("response lacks %s:\n%s", want, body)
		}
	}
}

func TestParamsIndices(t *testing.T) {
	t.Parallel()
	v, _ := url.ParseQuery("Filter.10.Name=b&Filter.2.Name=a&Filter.2.Value.1=x&Filter.x.Name=bad&Filter.0.Name=zero&FilterX.1=no&InstanceId.3=i-3&InstanceId.1=i-1")
	p := newParams(v)
	if diff := cmp.Diff([]string{"Filter.2", "Filter.10"}, p.indices("Filter")); diff != "" {
		t.Errorf("indices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"i-1", "i-3"}, p.list("InstanceId")); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"t3.*", "t3.micro", true},
		{"t3.*", "t3a.micro", false},
		{"*", "", true},
		{"c?i.large", "c6i.large", true},
		{"c?i.large", "c6in.large", false},
		{"*.xlarge", "m5.2xlarge", false},
		{"*xlarge", "m5.2xlarge", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false},
		{"exact", "exact", true},
		{strings.Repeat("*a", 50), strings.Repeat("a", 49) + "b", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// FuzzQuery posts arbitrary form bodies: the server must answer every one with EC2's
// success or error shape (200, 400 or 503), never panic or fail with 500.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{
		"Action=DescribeInstances&Version=2016-11-15",
		"Action=RunInstances&ImageId=ami-1&MinCount=1&MaxCount=2&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=a",
		"Action=CreateFleet&Type=instant&TargetCapacitySpecification.TotalTargetCapacity=2&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName=lt&LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version=$Latest",
		"Action=DescribeInstances&Filter.1.Name=tag:a&Filter.1.Value.1=*&MaxResults=5",
	} {
		f.Add([]byte(seed))
	}
	s := New(Options{PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1})
	f.Cleanup(s.Close)
	// A template so that fleet and run inputs can get past the lookup.
	prime := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("Action=CreateLaunchTemplate&LaunchTemplateName=lt&LaunchTemplateData.ImageId=ami-1&LaunchTemplateData.InstanceType=t3.micro"))
	prime.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	s.ServeHTTP(httptest.NewRecorder(), prime)

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 503:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code != 200 {
			var we wireError
			if err := xml.Unmarshal(rec.Body.Bytes(), &we); err != nil || we.Code == "" {
				t.Fatalf("bad error body for %q: %v %s", body, err, rec.Body.String())
			}
		}
		// Keep the shared model small: forget what the input launched.
		s.mu.Lock()
		if len(s.instances) > 1000 {
			clear(s.instances)
		}
		s.mu.Unlock()
	})
}
