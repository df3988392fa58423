// imds_transport.go: an in-process way to the instances' metadata services. On EC2 each instance
// asks its own host's IMDS; in the sandbox hundreds of agents share one machine, and each one's
// claim notice polls its IMDS every 50 ms over loopback TCP: at 600 idle agents that is 12,000
// requests a second of sockets and HTTP parsing on both ends, which sets the latency of everything
// else a bench measures. IMDSTransport serves the same handler without the sockets, so the agents'
// polling costs the machine what it costs one instance.
package ec2server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
)

// IMDSTransport returns a RoundTripper that serves requests to an instance's IMDS endpoint
// (RuntimeInstance.IMDSEndpoint) in process, through the same handler its listener serves, and
// passes every other request to base. A request to the endpoint of an instance whose IMDS is
// closed (stopped, terminated) fails with connection refused, as its listener would.
func (s *Server) IMDSTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return imdsTransport{s: s, base: base}
}

type imdsTransport struct {
	s    *Server
	base http.RoundTripper
}

func (t imdsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	endpoint := "http://" + r.URL.Host
	m, id, known := t.s.imdsFor(endpoint)
	if !known {
		return t.base.RoundTrip(r)
	}
	if m == nil {
		return nil, fmt.Errorf("dial tcp %s: %w", r.URL.Host, syscall.ECONNREFUSED)
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	in := r.Clone(r.Context())
	in.RequestURI = r.URL.RequestURI()
	in.RemoteAddr = "127.0.0.1:1"
	rec := httptest.NewRecorder()
	t.s.serveIMDS(m, id, rec, in)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// imdsFor finds the live IMDS behind endpoint: known reports whether it is (or was) an IMDS
// endpoint of this server at all; m is nil when that instance's IMDS is closed.
func (s *Server) imdsFor(endpoint string) (m *imdsServer, id string, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, known := s.imdsHosts[endpoint]
	if in == nil || in.imds == nil || in.imds.endpoint != endpoint {
		return nil, "", known
	}
	return in.imds, in.id, true
}
