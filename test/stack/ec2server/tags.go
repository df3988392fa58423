// DescribeTags, for instances (the only taggable resource the orphan sweep lists): filters key,
// value, resource-id and resource-type (patterns, as EC2's), MaxResults 5 to 1000 and NextToken.
// Entries come in launch order, then by key; a terminated instance keeps its tags until it is
// forgotten (TerminatedRetention).
package ec2server

import (
	"encoding/base64"
	"encoding/xml"
	"maps"
	"slices"
	"strconv"
	"strings"
)

type describeTagsResponse struct {
	XMLName xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeTagsResponse"`
	responseMeta
	TagSet    items[tagDescriptionXML] `xml:"tagSet"`
	NextToken string                   `xml:"nextToken,omitempty"`
}

type tagDescriptionXML struct {
	ResourceID   string `xml:"resourceId"`
	ResourceType string `xml:"resourceType"`
	Key          string `xml:"key"`
	Value        string `xml:"value"`
}

// tagFilters are the filters DescribeTags takes here, each the values of an entry it matches.
var tagFilters = map[string]func(id string, t tag) []string{
	"key":           func(_ string, t tag) []string { return []string{t.key} },
	"value":         func(_ string, t tag) []string { return []string{t.value} },
	"resource-id":   func(id string, _ tag) []string { return []string{id} },
	"resource-type": func(string, tag) []string { return []string{"instance"} },
}

func (s *Server) describeTags(p *params) (response, *apiError) {
	filters := p.filters()
	maxResults := 0
	if p.has("MaxResults") {
		maxResults = p.integer("MaxResults", 0)
		if p.err == nil && (maxResults < 5 || maxResults > 1000) {
			return nil, invalidValue("Value ( %d ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", maxResults)
		}
	}
	afterSeq, afterKey, hasToken := uint64(0), "", false
	if tok := p.str("NextToken"); tok != "" {
		var ok bool
		if afterSeq, afterKey, ok = parseTagToken(tok); !ok {
			return nil, &apiError{Status: 400, Code: "InvalidPaginationToken", Message: "The pagination token is invalid."}
		}
		hasToken = true
	}
	if p.err != nil {
		return nil, p.err
	}
	for _, f := range filters {
		if _, ok := tagFilters[f.name]; !ok {
			return nil, invalidValue("The filter '%s' is invalid", f.name)
		}
	}
	out := &describeTagsResponse{}
	for _, in := range s.sortedInstancesLocked() {
		if hasToken && in.seq < afterSeq {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(in.tags)) {
			if hasToken && in.seq == afterSeq && k <= afterKey {
				continue
			}
			t := tag{key: k, value: in.tags[k]}
			if !matchesTag(filters, in.id, t) {
				continue
			}
			if maxResults > 0 && len(out.TagSet.Items) == maxResults {
				last := out.TagSet.Items[len(out.TagSet.Items)-1]
				out.NextToken = tagToken(s.instances[last.ResourceID].seq, last.Key)
				return out, nil
			}
			out.TagSet.Items = append(out.TagSet.Items, tagDescriptionXML{ResourceID: in.id, ResourceType: "instance", Key: k, Value: t.value})
		}
	}
	return out, nil
}

func matchesTag(filters []filter, id string, t tag) bool {
	for _, f := range filters {
		if !matchAny(f.values, tagFilters[f.name](id, t)) {
			return false
		}
	}
	return true
}

func tagToken(seq uint64, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("t:" + strconv.FormatUint(seq, 10) + ":" + key))
}

func parseTagToken(tok string) (seq uint64, key string, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", false
	}
	rest, ok := strings.CutPrefix(string(raw), "t:")
	if !ok {
		return 0, "", false
	}
	n, key, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	seq, err = strconv.ParseUint(n, 10, 64)
	return seq, key, err == nil
}
