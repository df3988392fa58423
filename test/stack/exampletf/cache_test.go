package exampletf_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/iamsim"
)

const cacheBucket = "runnerpool-ci-prod-cache-123456789012-eu-west-1"

// nested evaluates the attributes of the blocks at path (block types, outermost first) of one
// instance of a resource; a dynamic block's content is evaluated once per element of its for_each.
func nested(t *testing.T, m *exampletf.Module, typ, name string, extra map[string]cty.Value, path ...string) []map[string]cty.Value {
	t.Helper()
	b := m.Block("resource", typ, name)
	if b == nil {
		t.Fatalf("no resource %s.%s", typ, name)
	}
	type scope struct {
		b     *hclsyntax.Block
		extra map[string]cty.Value
	}
	cur := []scope{{b, extra}}
	for _, want := range path {
		var next []scope
		for _, s := range cur {
			for _, nb := range s.b.Body.Blocks {
				switch {
				case nb.Type == want:
					next = append(next, scope{nb, s.extra})
				case nb.Type == "dynamic" && len(nb.Labels) == 1 && nb.Labels[0] == want:
					each, err := m.Eval(nb.Body.Attributes["for_each"].Expr, s.extra)
					if err != nil {
						t.Fatalf("%s.%s dynamic %s: %v", typ, name, want, err)
					}
					for it := each.ElementIterator(); it.Next(); {
						k, v := it.Element()
						ext := map[string]cty.Value{want: cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
						for n, x := range s.extra {
							ext[n] = x
						}
						for _, cb := range nb.Body.Blocks {
							if cb.Type == "content" {
								next = append(next, scope{cb, ext})
							}
						}
					}
				}
			}
		}
		cur = next
	}
	var out []map[string]cty.Value
	for _, s := range cur {
		attrs := map[string]cty.Value{}
		for n, a := range s.b.Body.Attributes {
			v, err := m.Eval(a.Expr, s.extra)
			if err != nil {
				t.Fatalf("%s.%s %v.%s: %v", typ, name, path, n, err)
			}
			attrs[n] = v
		}
		out = append(out, attrs)
	}
	return out
}

func first(t *testing.T, m *exampletf.Module, typ string, path ...string) map[string]cty.Value {
	t.Helper()
	got := nested(t, m, typ, "cache", map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(0)})}, path...)
	if len(got) != 1 {
		t.Fatalf("%s.cache %v: %d blocks, want 1", typ, path, len(got))
	}
	return got[0]
}

func num(v cty.Value) int64 {
	n, _ := v.AsBigFloat().Int64()
	return n
}

// TestExampleCacheBucket: a runner class with a cache entry (the tfvars example's small-x64) gets the
// cache block with GitHub's limits by default, and the deployment a bucket that is private (every
// public access blocked, ACLs off), encrypted with aws/s3 by default or with cache_kms_key_arn, whose
// lifecycle rule deletes cache objects after cache_expiration_days (30 by default) and aborts
// incomplete multipart uploads after a day, and that refuses requests without TLS; the reconciler is
// given the bucket (RUNNERPOOL_CACHE_BUCKET). Without a class with the cache, none of it exists.
func TestExampleCacheBucket(t *testing.T) {
	t.Parallel()
	m := loadWith(t, nil)
	if got := m.Resource("resource", "aws_s3_bucket", "cache").AsValueSlice(); len(got) != 1 || got[0].GetAttr("bucket").AsString() != cacheBucket {
		t.Fatalf("the cache bucket: %#v", got)
	}
	if env := m.Local("reconciler_environment").AsValueMap(); env["RUNNERPOOL_CACHE_BUCKET"].AsString() != cacheBucket {
		t.Errorf("RUNNERPOOL_CACHE_BUCKET %#v", env["RUNNERPOOL_CACHE_BUCKET"])
	}
	// The agents of a class with the cache on ask the reconciler's API for presigned URLs.
	if u := m.Resource("data", "runnerpool_user_data", "runner").GetAttr("cache_url"); u.IsNull() || u.AsString() != m.Variable("api_url").AsString() {
		t.Errorf("the user data's cache_url %#v, want api_url", u)
	}
	class := nested(t, m, "runnerpool_runner_class", "class", map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{
		"key": cty.StringVal("small-x64"), "value": m.Variable("runner_classes").Index(cty.StringVal("small-x64"))})}, "cache")
	if len(class) != 1 || num(class[0]["repository_limit_gib"]) != 10 || class[0]["max_age"].AsString() != "168h" {
		t.Errorf("small-x64's cache block: %#v", class)
	}

	pab := m.Resource("resource", "aws_s3_bucket_public_access_block", "cache").Index(cty.NumberIntVal(0))
	for _, a := range []string{"block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"} {
		if !pab.GetAttr(a).True() {
			t.Errorf("public access block: %s not true", a)
		}
	}
	if o := first(t, m, "aws_s3_bucket_ownership_controls", "rule"); o["object_ownership"].AsString() != "BucketOwnerEnforced" {
		t.Errorf("object ownership %#v", o)
	}
	sse := first(t, m, "aws_s3_bucket_server_side_encryption_configuration", "rule", "apply_server_side_encryption_by_default")
	if sse["sse_algorithm"].AsString() != "aws:kms" || !sse["kms_master_key_id"].IsNull() {
		t.Errorf("default encryption %#v: want aws:kms with aws/s3 (no key id)", sse)
	}
	if r := first(t, m, "aws_s3_bucket_server_side_encryption_configuration", "rule"); !r["bucket_key_enabled"].True() {
		t.Error("no bucket key: every object would cost a KMS request")
	}
	rule := first(t, m, "aws_s3_bucket_lifecycle_configuration", "rule")
	if rule["status"].AsString() != "Enabled" {
		t.Errorf("lifecycle rule %#v", rule)
	}
	if f := first(t, m, "aws_s3_bucket_lifecycle_configuration", "rule", "filter"); f["prefix"].AsString() != "v1/" {
		t.Errorf("lifecycle filter %#v", f)
	}
	if e := first(t, m, "aws_s3_bucket_lifecycle_configuration", "rule", "expiration"); num(e["days"]) != 30 {
		t.Errorf("lifecycle expiration %#v, want 30 days", e)
	}
	if a := first(t, m, "aws_s3_bucket_lifecycle_configuration", "rule", "abort_incomplete_multipart_upload"); num(a["days_after_initiation"]) != 1 {
		t.Errorf("abort of incomplete uploads %#v, want 1 day", a)
	}
	var pol struct {
		Statement []struct {
			Sid, Effect string
			Condition   map[string]map[string]any
		}
	}
	if err := json.Unmarshal([]byte(m.Resource("resource", "aws_s3_bucket_policy", "cache").Index(cty.NumberIntVal(0)).GetAttr("policy").AsString()), &pol); err != nil {
		t.Fatal(err)
	}
	if len(pol.Statement) != 1 || pol.Statement[0].Effect != "Deny" || fmt.Sprint(pol.Statement[0].Condition["Bool"]["aws:SecureTransport"]) != "[false]" {
		t.Errorf("bucket policy %+v: want a deny without TLS", pol)
	}

	const key = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	m = loadWith(t, map[string]cty.Value{"cache_kms_key_arn": cty.StringVal(key), "cache_expiration_days": cty.NumberIntVal(14)})
	sse = first(t, m, "aws_s3_bucket_server_side_encryption_configuration", "rule", "apply_server_side_encryption_by_default")
	if sse["sse_algorithm"].AsString() != "aws:kms" || sse["kms_master_key_id"].AsString() != key {
		t.Errorf("encryption with cache_kms_key_arn %#v", sse)
	}
	if e := first(t, m, "aws_s3_bucket_lifecycle_configuration", "rule", "expiration"); num(e["days"]) != 14 {
		t.Errorf("lifecycle expiration %#v, want cache_expiration_days 14", e)
	}

	m = loadWith(t, map[string]cty.Value{"runner_classes": cty.MapVal(map[string]cty.Value{"small-x64": cty.ObjectVal(map[string]cty.Value{
		"image": cty.StringVal("ami-0123456789abcdef0"), "cpu": cty.NumberIntVal(2), "memory_mib": cty.NumberIntVal(4096),
		"instance_types": cty.ListVal([]cty.Value{cty.StringVal("c7i.*")}),
	})})})
	if n := len(m.Resource("resource", "aws_s3_bucket", "cache").AsValueSlice()); n != 0 {
		t.Errorf("no class with the cache: %d buckets", n)
	}
	if _, ok := m.Local("reconciler_environment").AsValueMap()["RUNNERPOOL_CACHE_BUCKET"]; ok {
		t.Error("no class with the cache: RUNNERPOOL_CACHE_BUCKET is set")
	}
	if u := m.Resource("data", "runnerpool_user_data", "runner").GetAttr("cache_url"); !u.IsNull() {
		t.Errorf("no class with the cache: the user data's cache_url %#v", u)
	}
	if pols, _ := m.RolePolicies("reconciler"); pols["runnerpool-reconciler-cache"] != "" {
		t.Error("no class with the cache: the reconciler has a cache policy")
	}
}

// TestExampleCacheExpirationCoversMaxAge: the lifecycle backstop may not delete what a class keeps:
// apply refuses cache_expiration_days below a class's max_age_days.
func TestExampleCacheExpirationCoversMaxAge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		days int64
		want string
	}{{7, ""}, {6, "cache_expiration_days is shorter"}} {
		m := loadWith(t, map[string]cty.Value{"cache_expiration_days": cty.NumberIntVal(tc.days)})
		failed, err := m.Check()
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(failed, "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("cache_expiration_days %d (max_age_days 7): failed checks %q, want %q", tc.days, got, tc.want)
		}
	}
}

// TestExampleCacheBucketInSimulator: in an IAM simulator we did not write, the reconciler's role may
// presign (and its eviction pass make) gets, puts, deletes and listings under v1/ of the cache bucket,
// nothing else in it and nothing in another bucket, and, with cache_kms_key_arn, use the key through
// S3 only; the runners' instance role can do nothing at all with the bucket, whatever request a job
// holding its credentials makes; and the bucket refuses a request without TLS even from the reconciler.
func TestExampleCacheBucketInSimulator(t *testing.T) {
	t.Parallel()
	const account, key = "123456789012", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	m := loadWith(t, map[string]cty.Value{"cache_kms_key_arn": cty.StringVal(key)})
	policies := func(role string) []iamsim.Policy {
		docs, err := m.RolePolicies(role)
		if err != nil {
			t.Fatal(err)
		}
		var out []iamsim.Policy
		for n, d := range docs {
			out = append(out, iamsim.Policy{Name: n, Policy: []byte(d)})
		}
		return out
	}
	bucketPolicy := []byte(m.Resource("resource", "aws_s3_bucket_policy", "cache").Index(cty.NumberIntVal(0)).GetAttr("policy").AsString())
	bucket := "arn:aws:s3:::" + cacheBucket
	object := bucket + "/v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/0a1b/knode-deps"
	type simCase struct {
		name string
		req  iamsim.Request
		want bool
	}
	check := func(role, principal string, extra map[string]any, cases []simCase) {
		t.Helper()
		reqs := make([]iamsim.Request, len(cases))
		for i, c := range cases {
			c.req.Principal, c.req.Account = principal, account
			ctx := map[string]any{"aws:SecureTransport": "true"}
			for k, v := range extra {
				ctx[k] = v
			}
			for k, v := range c.req.Context {
				ctx[k] = v
			}
			c.req.Context = ctx
			switch {
			case strings.HasPrefix(c.req.Resource, bucket):
				c.req.ResourcePolicy = bucketPolicy
			case c.req.Resource == key:
				// KMS's default key policy, which lets the account's IAM policies decide (AWS KMS
				// Developer Guide, "Default key policy").
				c.req.ResourcePolicy = []byte(`{"Version":"2012-10-17","Statement":[{"Sid":"Enable IAM User Permissions","Effect":"Allow",` +
					`"Principal":{"AWS":"arn:aws:iam::` + account + `:root"},"Action":"kms:*","Resource":"*"}]}`)
			}
			reqs[i] = c.req
		}
		got, err := iamsim.Simulate(t.Context(), policies(role), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range got {
			if (d == iamsim.Allowed) != cases[i].want {
				t.Errorf("%s: %s: %s, want allowed=%v", role, cases[i].name, d, cases[i].want)
			}
		}
	}
	req := func(action, resource string, ctx map[string]any) iamsim.Request {
		return iamsim.Request{Action: action, Resource: resource, Context: ctx}
	}
	prefix := func(p string) map[string]any { return map[string]any{"s3:prefix": p} }
	via := func(service string) map[string]any {
		return map[string]any{"kms:ViaService": service + ".eu-west-1.amazonaws.com"}
	}

	check("reconciler", "arn:aws:sts::"+account+":assumed-role/runnerpool-ci-prod-reconciler/task", nil, []simCase{
		{"get a cache object", req("s3:GetObject", object, nil), true},
		{"put a cache object", req("s3:PutObject", object, nil), true},
		{"delete a cache object (eviction)", req("s3:DeleteObject", object, nil), true},
		{"list a scope's prefix", req("s3:ListBucket", bucket, prefix("v1/acme~2Fapp/trusted/")), true},
		{"list every cache object (eviction)", req("s3:ListBucket", bucket, prefix("v1/")), true},
		{"list the whole bucket", req("s3:ListBucket", bucket, nil), false},
		{"get an object outside v1/", req("s3:GetObject", bucket+"/other/x", nil), false},
		{"put in another bucket", req("s3:PutObject", "arn:aws:s3:::other-bucket/v1/x", nil), false},
		{"change the bucket's policy", req("s3:PutBucketPolicy", bucket, nil), false},
		{"get without TLS", req("s3:GetObject", object, map[string]any{"aws:SecureTransport": "false"}), false},
		{"a data key through S3", req("kms:GenerateDataKey", key, via("s3")), true},
		{"decrypt through S3", req("kms:Decrypt", key, via("s3")), true},
		{"decrypt directly", req("kms:Decrypt", key, nil), false},
	})
	instance := "arn:aws:ec2:eu-west-1:" + account + ":instance/i-0123456789abcdef0"
	check("runner", "arn:aws:sts::"+account+":assumed-role/runnerpool-ci-prod-runner/i-0123456789abcdef0", map[string]any{
		"ec2:SourceInstanceARN": instance, "aws:SourceVpc": "vpc-0123456789abcdef0", "aws:EC2InstanceSourceVPC": "vpc-0123456789abcdef0",
		"aws:VpcSourceIp": "10.0.1.5", "aws:EC2InstanceSourcePrivateIPv4": "10.0.1.5",
	}, []simCase{
		{"get a cache object", req("s3:GetObject", object, nil), false},
		{"put a cache object", req("s3:PutObject", object, nil), false},
		{"delete a cache object", req("s3:DeleteObject", object, nil), false},
		{"list a scope's prefix", req("s3:ListBucket", bucket, prefix("v1/acme~2Fapp/trusted/")), false},
		{"list the bucket", req("s3:ListBucket", bucket, nil), false},
		{"decrypt with the cache key through S3", req("kms:Decrypt", key, via("s3")), false},
	})
}
