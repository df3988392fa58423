// query.go: reading EC2 Query-protocol parameters (form values such as InstanceId.1,
// Filter.2.Value.1, TagSpecification.1.Tag.3.Key) into Go values, plus the small matching
// helpers (wildcards, id formats) shared by the action handlers.
package ec2server

import (
	"encoding/base64"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// params is one request's form, with the keys kept sorted so that every key under a prefix
// ("LaunchTemplateConfigs.3.") is found by binary search: nested lists stay linear in the size
// of the request however they are indexed. The first error met while reading is kept in err;
// handlers read everything they need and then check it once.
type params struct {
	v    url.Values
	keys []string
	err  *apiError
}

func newParams(v url.Values) *params {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return &params{v: v, keys: keys}
}

// fail records the first error; later ones are dropped, as EC2 reports one error per call.
func (p *params) fail(e *apiError) {
	if p.err == nil {
		p.err = e
	}
}

func (p *params) has(key string) bool { _, ok := p.v[key]; return ok }

func (p *params) str(key string) string { return p.v.Get(key) }

// required returns a non-empty value or records MissingParameter.
func (p *params) required(key string) string {
	s := p.v.Get(key)
	if s == "" {
		p.fail(missingParameter(key))
	}
	return s
}

// integer reads key as a base-10 integer; def when absent.
func (p *params) integer(key string, def int) int {
	s, ok := p.v[key]
	if !ok || len(s) == 0 {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(s[0]))
	if err != nil {
		p.fail(invalidValue("Invalid value '%s' for %s. Expected an integer.", s[0], key))
		return def
	}
	return n
}

// number reads key as a float (WeightedCapacity, Priority); def when absent.
func (p *params) number(key string, def float64) float64 {
	s, ok := p.v[key]
	if !ok || len(s) == 0 {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s[0]), 64)
	if err != nil || f != f { // NaN is not a usable weight or priority
		p.fail(invalidValue("Invalid value '%s' for %s. Expected a number.", s[0], key))
		return def
	}
	return f
}

// under returns the sorted keys that start with prefix.
func (p *params) under(prefix string) []string {
	lo := sort.SearchStrings(p.keys, prefix)
	hi := lo
	for hi < len(p.keys) && strings.HasPrefix(p.keys[hi], prefix) {
		hi++
	}
	return p.keys[lo:hi]
}

// hasPrefix reports whether any key lies under prefix (prefix itself or prefix + ".").
func (p *params) hasPrefix(prefix string) bool {
	return p.has(prefix) || len(p.under(prefix+".")) > 0
}

// indices returns, in numeric order, the member tokens of the list at prefix: for keys
// "Filter.2.Name" and "Filter.10.Value.1" it returns ["Filter.2", "Filter.10"]. EC2 does not
// require indices to be contiguous, only positive integers.
func (p *params) indices(prefix string) []string {
	type member struct {
		n   int
		key string
	}
	var ms []member
	seen := map[int]bool{}
	pre := prefix + "."
	for _, k := range p.under(pre) {
		rest := k[len(pre):]
		tok, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(tok)
		if err != nil || n < 1 || seen[n] {
			continue
		}
		seen[n] = true
		ms = append(ms, member{n, pre + tok})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].n < ms[j].n })
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.key
	}
	return out
}

// list returns the values of a list of scalars (InstanceId.1, InstanceId.2, ...).
func (p *params) list(prefix string) []string {
	var out []string
	for _, m := range p.indices(prefix) {
		if p.has(m) {
			out = append(out, p.str(m))
		}
	}
	return out
}

type filter struct {
	name   string
	values []string
}

// filters reads Filter.N.Name / Filter.N.Value.M.
func (p *params) filters() []filter {
	var out []filter
	for _, m := range p.indices("Filter") {
		name := p.str(m + ".Name")
		if name == "" {
			p.fail(missingParameter(m + ".Name"))
			continue
		}
		out = append(out, filter{name: name, values: p.list(m + ".Value")})
	}
	return out
}

type tag struct{ key, value string }

// tags reads prefix.N.Key / prefix.N.Value; valueSet reports per tag whether Value was sent
// (DeleteTags distinguishes an absent value from an empty one).
func (p *params) tags(prefix string) (tags []tag, valueSet []bool) {
	for _, m := range p.indices(prefix) {
		if !p.has(m+".Key") && !p.has(m+".Value") {
			continue
		}
		tags = append(tags, tag{key: p.str(m + ".Key"), value: p.str(m + ".Value")})
		valueSet = append(valueSet, p.has(m+".Value"))
	}
	return tags, valueSet
}

type tagSpec struct {
	resourceType string
	tags         []tag
}

// tagSpecs reads prefix.N.ResourceType / prefix.N.Tag.M.Key|Value and validates the tags.
func (p *params) tagSpecs(prefix string) []tagSpec {
	var out []tagSpec
	for _, m := range p.indices(prefix) {
		rt := p.str(m + ".ResourceType")
		if rt == "" {
			p.fail(missingParameter(m + ".ResourceType"))
			continue
		}
		tags, _ := p.tags(m + ".Tag")
		if err := validateTags(tags); err != nil {
			p.fail(err)
		}
		out = append(out, tagSpec{resourceType: rt, tags: tags})
	}
	return out
}

// tagsFor merges the tags of every spec of the given resource type, later specs winning.
func tagsFor(specs []tagSpec, resourceType string) map[string]string {
	out := map[string]string{}
	for _, s := range specs {
		if s.resourceType == resourceType {
			for _, t := range s.tags {
				out[t.key] = t.value
			}
		}
	}
	return out
}

const maxTagsPerResource = 50

// validateTags applies EC2's tag rules: key 1..128 characters, not starting with the reserved
// "aws:" prefix, value up to 256 characters.
func validateTags(tags []tag) *apiError {
	if len(tags) > maxTagsPerResource {
		return &apiError{Status: 400, Code: "TagLimitExceeded", Message: "The maximum number of tags per resource is 50."}
	}
	for _, t := range tags {
		switch {
		case t.key == "":
			return invalidValue("Tag key cannot be empty.")
		case len(t.key) > 128:
			return invalidValue("Tag key exceeds the maximum length of 128 characters.")
		case len(t.value) > 256:
			return invalidValue("Tag value exceeds the maximum length of 256 characters.")
		case strings.HasPrefix(strings.ToLower(t.key), "aws:"):
			return invalidValue("Tag keys starting with 'aws:' are reserved for internal use.")
		}
	}
	return nil
}

// decodeUserData checks that user data is valid base64 (as the SDK sends it) and returns the
// decoded text. EC2 limits user data to 16 KiB before encoding.
func decodeUserData(b64 string) (string, *apiError) {
	if b64 == "" {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", &apiError{Status: 400, Code: "InvalidUserData.Malformed", Message: "Invalid BASE64 encoding of user data."}
	}
	if len(raw) > 16*1024 {
		return "", &apiError{Status: 400, Code: "InvalidParameterValue", Message: "User data is limited to 16384 bytes."}
	}
	return string(raw), nil
}

// globMatch matches s against an EC2 filter value, where '*' matches any run of characters
// and '?' exactly one. Linear-time two-pointer algorithm, so hostile patterns stay cheap.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && (pattern[px] == '?' || pattern[px] == s[sx]):
			px++
			sx++
		case px < len(pattern) && pattern[px] == '*':
			starP, starS = px, sx
			px++
		case starP >= 0:
			starS++
			px, sx = starP+1, starS
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// matchAny reports whether any value matches any pattern.
func matchAny(patterns, values []string) bool {
	for _, pat := range patterns {
		for _, v := range values {
			if globMatch(pat, v) {
				return true
			}
		}
	}
	return false
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validResourceID reports whether id looks like prefix-HEX with 8 or 17 hex digits, the two
// formats EC2 has used for resource ids.
func validResourceID(id, prefix string) bool {
	hex, ok := strings.CutPrefix(id, prefix+"-")
	return ok && (len(hex) == 8 || len(hex) == 17) && isHex(hex)
}

// pageToken and parsePageToken make the opaque NextToken values: the position (launch
// sequence or list offset) after which the next page starts.
func pageToken(pos uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("p:" + strconv.FormatUint(pos, 10)))
}

func parsePageToken(tok string) (uint64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, false
	}
	s, ok := strings.CutPrefix(string(raw), "p:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// paging reads MaxResults/NextToken with EC2's bounds; max 0 means "no MaxResults given".
func (p *params) paging(lo, hi int) (max int, after uint64, hasToken bool) {
	if p.has("MaxResults") {
		max = p.integer("MaxResults", 0)
		if p.err == nil && (max < lo || max > hi) {
			p.fail(invalidValue("Value ( %d ) for parameter maxResults is invalid. Expecting a value between %d and %d.", max, lo, hi))
		}
	}
	if tok := p.str("NextToken"); tok != "" {
		n, ok := parsePageToken(tok)
		if !ok {
			p.fail(&apiError{Status: 400, Code: "InvalidPaginationToken", Message: "The pagination token is invalid."})
		}
		after, hasToken = n, true
	}
	return max, after, hasToken
}
