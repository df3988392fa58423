// Rejections through a real replica: every 401 and 403 (and every refused body) answers the
// documented code and leaves the table exactly as it was.
package service_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// scan returns every item of the table except those that change on their own while nothing
// happens: the leader lease (renewed) and heartbeats (written by the simulated agents).
func scan(t *testing.T, env *servicetest.Env) map[string]string {
	t.Helper()
	items := map[string]string{}
	p := dynamodb.NewScanPaginator(env.Stack.DynamoDB(), &dynamodb.ScanInput{TableName: aws.String(env.Table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		for _, it := range page.Items {
			pk := it["pk"].(*types.AttributeValueMemberS).Value
			sk := it["sk"].(*types.AttributeValueMemberS).Value
			if strings.HasPrefix(pk, "LEASE#") || sk == "HEARTBEAT" {
				continue
			}
			items[pk+"|"+sk] = render(it)
		}
	}
	return items
}

func render(item map[string]types.AttributeValue) string {
	m := map[string]any{}
	for k, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			m[k] = "S:" + v.Value
		case *types.AttributeValueMemberN:
			m[k] = "N:" + v.Value
		case *types.AttributeValueMemberBOOL:
			m[k] = v.Value
		default:
			m[k] = fmt.Sprintf("%T", v)
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// tamper changes the run id in the token's payload and keeps the signature.
func tamper(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	claims["run_id"] = "2001"
	b, _ := json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func TestRejectionsChangeNothing(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	env.Fill(t, 2)
	r := env.Start(t, "a", nil)
	// A provision of run 2001 to protect.
	if code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "2001", nil), provisionBody(1)); code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	key := servicetest.RepositoryID + ":2001:1"
	before := scan(t, env)
	if len(before) < 3 {
		t.Fatalf("the table holds %d items before the rejections; want the run and its instances", len(before))
	}
	instancesBefore := len(env.EC2.Instances())

	now := time.Now()
	mint := func(run string, claims map[string]any) string { return env.Token(t, run, claims) }
	unknownKey, err := env.Issuer.MintWithUnknownKey(env.Claims("2001", nil))
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{
		"missing":        "",
		"garbage":        "not-a-jwt",
		"wrong audience": mint("2001", map[string]any{"aud": "https://github.com/acme"}),
		"expired":        mint("2001", map[string]any{"iat": now.Add(-20 * time.Minute), "nbf": now.Add(-20 * time.Minute), "exp": now.Add(-10 * time.Minute)}),
		"bad signature":  tamper(t, mint("9999", nil)),
		"unknown key":    unknownKey,
		"other issuer":   mint("2001", map[string]any{"iss": "https://token.actions.githubusercontent.com"}),
		"no run id":      mint("2001", map[string]any{"run_id": nil}),
		"not allowed":    mint("2001", map[string]any{"repository": "evil/api", "repository_owner": "evil", "repository_id": "666"}),
		"owner mismatch": mint("2001", map[string]any{"repository": "acme/api", "repository_owner": "evil"}),
		// Allowed through its owner, but another repository than run 2001's.
		"other repository": mint("2001", map[string]any{"repository": "trusted-org/tools", "repository_owner": "trusted-org", "repository_id": "5555"}),
		"other run":        mint("2002", nil),
		"valid":            mint("2001", nil),
		"fresh run":        mint("3001", nil),
	}
	type tc struct {
		token, method, path string
		body                any
		status              int
		code                string
	}
	var cases []tc
	for _, ep := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, apiv1.PathProvision, provisionBody(1)},
		{http.MethodPost, apiv1.PathRelease, apiv1.ReleaseRequest{}},
		{http.MethodGet, apiv1.PathRuns + "2001", nil},
		{http.MethodGet, apiv1.PathPools, nil},
	} {
		for _, c := range []struct {
			token  string
			status int
			code   string
		}{
			{"missing", 401, apiv1.CodeMissingToken},
			{"garbage", 401, apiv1.CodeInvalidToken},
			{"wrong audience", 401, apiv1.CodeWrongAudience},
			{"expired", 401, apiv1.CodeTokenExpired},
			{"bad signature", 401, apiv1.CodeInvalidToken},
			{"unknown key", 401, apiv1.CodeInvalidToken},
			{"other issuer", 401, apiv1.CodeInvalidToken},
			{"no run id", 401, apiv1.CodeInvalidClaims},
			{"not allowed", 403, apiv1.CodeNotAllowed},
			{"owner mismatch", 403, apiv1.CodeNotAllowed},
		} {
			cases = append(cases, tc{c.token, ep.method, ep.path, ep.body, c.status, c.code})
		}
	}
	cases = append(cases,
		// The binding: only run 2001 of repository 4242 may read or release run 2001's provision.
		tc{"other run", http.MethodGet, apiv1.PathRuns + "2001", nil, 403, apiv1.CodeOtherRun},
		tc{"other run", http.MethodGet, apiv1.PathRuns + key, nil, 403, apiv1.CodeOtherRun},
		tc{"other run", http.MethodPost, apiv1.PathRelease, apiv1.ReleaseRequest{RunKey: key}, 403, apiv1.CodeOtherRun},
		tc{"other repository", http.MethodGet, apiv1.PathRuns + key, nil, 403, apiv1.CodeOtherRepository},
		tc{"other repository", http.MethodPost, apiv1.PathRelease, apiv1.ReleaseRequest{RunKey: key}, 403, apiv1.CodeOtherRepository},
		// A valid token of another run reading its own (absent) provision finds nothing.
		tc{"other run", http.MethodGet, apiv1.PathRuns + "2002", nil, 404, apiv1.CodeRunNotFound},
		tc{"other run", http.MethodPost, apiv1.PathRelease, nil, 404, apiv1.CodeRunNotFound},
		// Refused bodies, with a valid token of a run that has no provision yet.
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `{"count": 1, "allowed_instance_types": ["c6i.*"], "resource_class": "small", "extra": 1}`, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `{"count": 1,`, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `{"count": "one"}`, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `{"count": 1} {"count": 2}`, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `[]`, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, ``, 400, apiv1.CodeBadRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, `{"count": 1, "pad": "` + strings.Repeat("x", 70<<10) + `"}`, 413, apiv1.CodeBodyTooLarge},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, apiv1.ProvisionRequest{Count: 0, AllowedInstanceTypes: []string{"c6i.*"}}, 400, apiv1.CodeInvalidRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, apiv1.ProvisionRequest{Count: 1, AllowedInstanceTypes: []string{"c6i.*"}, RunnerClass: "gpu"}, 400, apiv1.CodeInvalidRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathProvision, apiv1.ProvisionRequest{Count: 1, AllowedInstanceTypes: []string{"c6i.*"}, ResourceClass: "small", CPU: 4}, 400, apiv1.CodeInvalidRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathRelease, `{"idle_time_seconds": -5}`, 400, apiv1.CodeInvalidRequest},
		tc{"fresh run", http.MethodPost, apiv1.PathRelease, `{"attempt": 2}`, 400, apiv1.CodeInvalidRequest},
		tc{"fresh run", http.MethodGet, apiv1.PathRuns + "abc", nil, 400, apiv1.CodeInvalidRequest},
		tc{"valid", http.MethodGet, apiv1.PathProvision, nil, 405, apiv1.CodeMethodNotAllowed},
		tc{"valid", http.MethodDelete, apiv1.PathRuns + "2001", nil, 405, apiv1.CodeMethodNotAllowed},
		tc{"valid", http.MethodGet, "/v2/provision", nil, 404, apiv1.CodeNotFound},
	)
	for _, c := range cases {
		name := fmt.Sprintf("%s %s %s", c.method, c.path, c.token)
		t.Run(name, func(t *testing.T) {
			code, body := servicetest.Call(t, c.method, r.URL+c.path, tokens[c.token], c.body)
			var e apiv1.Error
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("answer %d is not JSON: %s", code, body)
			}
			if code != c.status || e.Code != c.code {
				t.Errorf("got %d %s (%s), want %d %s", code, e.Code, e.Error, c.status, c.code)
			}
			if e.Error == "" || e.RequestID == "" {
				t.Errorf("error body %s lacks a message or request id", body)
			}
		})
	}
	// A request with a non-JSON content type is refused before it is read.
	req, _ := http.NewRequest(http.MethodPost, r.URL+apiv1.PathProvision, strings.NewReader(`{"count":1}`))
	req.Header.Set("Authorization", "Bearer "+tokens["fresh run"])
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %v %v, want 415", resp, err)
	} else {
		resp.Body.Close()
	}

	if diff := cmp.Diff(before, scan(t, env)); diff != "" {
		t.Errorf("the table changed (-before +after):\n%s", diff)
	}
	if n := len(env.EC2.Instances()); n != instancesBefore {
		t.Errorf("EC2 instances: %d, want %d as before", n, instancesBefore)
	}
	// The protected run is intact and still readable by its own token.
	code, body := servicetest.Call(t, http.MethodGet, r.URL+apiv1.PathRuns+"2001", tokens["valid"], nil)
	if run := servicetest.Decode[apiv1.RunResponse](t, body); code != http.StatusOK || run.Status != apiv1.StatusSucceeded || len(run.Releases) != 0 {
		t.Errorf("run 2001 after the rejections: %d %s", code, body)
	}
}
