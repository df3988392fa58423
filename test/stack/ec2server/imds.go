// imds.go: the per-instance instance metadata service, IMDSv2 only, on its own loopback
// listener (the SDK's imds client and the agent address it by endpoint, paths unprefixed).
// It serves the token endpoint, the metadata paths runnerpool reads (ids, placement, tags when
// the instance allows metadata tags), user data and the identity document.
package ec2server

import (
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	imdsTokenHeader    = "X-Aws-Ec2-Metadata-Token"
	imdsTokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
)

type imdsServer struct {
	srv      *http.Server
	endpoint string

	mu     sync.Mutex
	tokens map[string]time.Time // token -> expiry, on the server's clock
}

func (m *imdsServer) close() { _ = m.srv.Close() }

// startIMDSLocked opens the instance's metadata listener on 127.0.0.1:0.
func (s *Server) startIMDSLocked(id string) (*imdsServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &imdsServer{endpoint: "http://" + ln.Addr().String(), tokens: map[string]time.Time{}}
	m.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveIMDS(m, id, w, r) }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = m.srv.Serve(ln)
	}()
	if s.imdsHosts == nil {
		s.imdsHosts = map[string]*instance{}
	}
	s.imdsHosts[m.endpoint] = s.instances[id]
	return m, nil
}

func (s *Server) closeIMDSLocked(in *instance) {
	if in.imds != nil {
		s.imdsHosts[in.imds.endpoint] = nil // known, and refused from now on
		in.imds.close()
		in.imds = nil
	}
}

func (s *Server) serveIMDS(m *imdsServer, id string, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Server", "EC2ws")
	w.Header().Set("Content-Type", "text/plain")
	now := s.opts.Now()

	if r.URL.Path == "/latest/api/token" {
		if r.Method != http.MethodPut {
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("X-Forwarded-For") != "" { // IMDS refuses proxied token requests
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		ttl, err := strconv.Atoi(r.Header.Get(imdsTokenTTLHeader))
		if err != nil || ttl < 1 || ttl > 21600 {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		token := randomHex(56)
		m.mu.Lock()
		for t, exp := range m.tokens { // drop expired tokens as new ones come
			if !now.Before(exp) {
				delete(m.tokens, t)
			}
		}
		m.tokens[token] = now.Add(time.Duration(ttl) * time.Second)
		m.mu.Unlock()
		w.Header().Set(imdsTokenTTLHeader, strconv.Itoa(ttl))
		_, _ = w.Write([]byte(token))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	m.mu.Lock()
	exp, ok := m.tokens[r.Header.Get(imdsTokenHeader)]
	m.mu.Unlock()
	if !ok || !now.Before(exp) { // IMDSv2 only: no token, no metadata
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}

	s.mu.Lock()
	in, found := s.instances[id]
	var v InstanceView
	var tagsEnabled bool
	if found {
		v = in.view()
		tagsEnabled = in.metadata.instanceMetadataTags == "enabled"
	}
	s.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	body, ok := s.metadataPath(v, tagsEnabled, strings.TrimSuffix(r.URL.Path, "/"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(body))
}

// metadataPath answers one GET path for the instance.
func (s *Server) metadataPath(v InstanceView, tagsEnabled bool, path string) (string, bool) {
	if key, ok := strings.CutPrefix(path, "/latest/meta-data/tags/instance/"); ok && tagsEnabled {
		val, ok := v.Tags[key]
		return val, ok
	}
	switch path {
	case "/latest/meta-data":
		entries := []string{"ami-id", "hostname", "instance-id", "instance-life-cycle", "instance-type",
			"local-hostname", "local-ipv4", "placement/"}
		if tagsEnabled {
			entries = append(entries, "tags/")
		}
		if v.SpotInstanceAction != "" {
			entries = append(entries, "spot/")
		}
		return strings.Join(entries, "\n"), true
	case "/latest/meta-data/spot":
		return "instance-action", v.SpotInstanceAction != ""
	case "/latest/meta-data/spot/instance-action":
		// 404 until an interruption is announced, as EC2 serves it.
		return v.SpotInstanceAction, v.SpotInstanceAction != ""
	case "/latest/meta-data/ami-id":
		return v.ImageID, true
	case "/latest/meta-data/instance-id":
		return v.ID, true
	case "/latest/meta-data/instance-type":
		return v.InstanceType, true
	case "/latest/meta-data/instance-life-cycle":
		return v.Lifecycle, true
	case "/latest/meta-data/hostname", "/latest/meta-data/local-hostname":
		return "ip-" + strings.ReplaceAll(v.PrivateIP, ".", "-") + ".ec2.internal", true
	case "/latest/meta-data/local-ipv4":
		return v.PrivateIP, true
	case "/latest/meta-data/placement":
		return "availability-zone\nregion", true
	case "/latest/meta-data/placement/availability-zone":
		return v.AvailabilityZone, true
	case "/latest/meta-data/placement/region":
		return s.opts.Region, true
	case "/latest/meta-data/tags":
		return "instance", tagsEnabled
	case "/latest/meta-data/tags/instance":
		// EC2 serves instance tags only when the instance's metadata options enable them.
		return strings.Join(slices.Sorted(maps.Keys(v.Tags)), "\n"), tagsEnabled
	case "/latest/user-data":
		return v.UserData, v.UserData != ""
	case "/latest/dynamic/instance-identity/document":
		arch := "x86_64"
		if t := catalogByName[v.InstanceType]; t != nil {
			arch = t.Arch
		}
		doc, _ := json.MarshalIndent(map[string]any{
			"accountId":        accountID,
			"architecture":     arch,
			"availabilityZone": v.AvailabilityZone,
			"imageId":          v.ImageID,
			"instanceId":       v.ID,
			"instanceType":     v.InstanceType,
			"pendingTime":      v.LaunchTime.UTC().Format(time.RFC3339),
			"privateIp":        v.PrivateIP,
			"region":           s.opts.Region,
			"version":          "2017-09-30",
		}, "", "  ")
		return string(doc), true
	}
	return "", false
}
