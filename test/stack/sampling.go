// The SQS sampling proxy: real Amazon SQS answers a short poll (ReceiveMessage with WaitTimeSeconds
// 0) from a subset of the queue's servers, so with few messages in a queue a receive can come back
// empty although messages are there ("short polling ... samples a subset of its servers"; only a long
// poll queries them all). fauxqs always answers from the whole queue, so no test would see that.
// The Sampler sits in front of fauxqs and answers a short poll empty with a configurable
// probability, without forwarding it (a forwarded receive would hide the messages it returned for
// their visibility timeout). Long polls and every other call pass through unchanged.
//
// It is harsher than SQS, on purpose: the probability does not fall as the queue fills up, so code
// that is correct under it does not count on a large queue to answer.
//
// It reads the two protocols the SDK has used: JSON (X-Amz-Target: AmazonSQS.ReceiveMessage, the
// aws-sdk-go-v2 default since 2023) and the older query protocol (Action=ReceiveMessage).
package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// EnvSQSSampling sets the probability (0 to 1, exclusive) with which the local stack's SQS endpoint
// answers a short poll empty; Options.SQSSampling takes precedence. Unset or 0: no proxy, fauxqs
// answers directly.
const EnvSQSSampling = "RUNNERPOOL_STACK_SQS_SAMPLING"

// maxSampledBody bounds the request bodies the Sampler reads (SQS takes at most 256 KiB of message
// data per request; the envelope adds little).
const maxSampledBody = 2 << 20

// SamplerStats counts what a Sampler saw.
type SamplerStats struct {
	ShortPolls int64 // ReceiveMessage calls with WaitTimeSeconds 0 (or none)
	Emptied    int64 // of those, answered empty without reaching the queue
	LongPolls  int64 // ReceiveMessage calls with WaitTimeSeconds > 0 (never emptied)
}

// Sampler is the sampling proxy, an http.Handler in front of an SQS endpoint.
type Sampler struct {
	p     float64
	proxy *httputil.ReverseProxy

	mu  sync.Mutex
	rng *rand.Rand

	shortPolls, emptied, longPolls atomic.Int64
}

// NewSampler returns a proxy to the SQS endpoint upstream (http://host:port) that answers a short
// poll empty with probability p (0 <= p < 1). seed makes the draws repeatable (0: random).
func NewSampler(upstream string, p float64, seed uint64) (*Sampler, error) {
	if p < 0 || p >= 1 || p != p {
		return nil, fmt.Errorf("SQS sampling probability %v is not in [0, 1)", p)
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("SQS sampler upstream %q is not an http URL", upstream)
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Sampler{
		p:     p,
		rng:   rand.New(rand.NewPCG(seed, seed^0x5eed)),
		proxy: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }},
	}, nil
}

// ParseSampling reads a sampling probability as given in EnvSQSSampling ("" is 0).
func ParseSampling(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p >= 1 {
		return 0, fmt.Errorf("%s=%q: want a probability in [0, 1), e.g. 0.3", EnvSQSSampling, s)
	}
	return p, nil
}

// samplingFromEnv is the probability of EnvSQSSampling.
func samplingFromEnv() (float64, error) { return ParseSampling(os.Getenv(EnvSQSSampling)) }

// Stats returns the counters.
func (s *Sampler) Stats() SamplerStats {
	return SamplerStats{ShortPolls: s.shortPolls.Load(), Emptied: s.emptied.Load(), LongPolls: s.longPolls.Load()}
}

// ServeHTTP answers a short poll empty with probability p and forwards everything else.
func (s *Sampler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil {
		s.proxy.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSampledBody+1))
	_ = r.Body.Close()
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxSampledBody {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))

	receive, wait, jsonProto := classifyReceive(r, body)
	switch {
	case !receive:
	case wait > 0:
		s.longPolls.Add(1)
	default:
		s.shortPolls.Add(1)
		if s.draw() {
			s.emptied.Add(1)
			writeEmptyReceive(w, jsonProto)
			return
		}
	}
	s.proxy.ServeHTTP(w, r)
}

func (s *Sampler) draw() bool {
	if s.p == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Float64() < s.p
}

// classifyReceive reports whether the request is a ReceiveMessage, its WaitTimeSeconds (0 when not
// given: the pool queues' default is 0), and whether it uses the JSON protocol.
func classifyReceive(r *http.Request, body []byte) (receive bool, wait int, jsonProto bool) {
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		if target != "AmazonSQS.ReceiveMessage" {
			return false, 0, true
		}
		var in struct {
			WaitTimeSeconds *int `json:"WaitTimeSeconds"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			// Not ours to judge: fauxqs answers the malformed request.
			return false, 0, true
		}
		if in.WaitTimeSeconds != nil {
			wait = *in.WaitTimeSeconds
		}
		return true, wait, true
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("Action") != "ReceiveMessage" {
		return false, 0, false
	}
	wait, _ = strconv.Atoi(form.Get("WaitTimeSeconds"))
	return true, wait, false
}

// writeEmptyReceive writes SQS's answer to a receive that found nothing.
func writeEmptyReceive(w http.ResponseWriter, jsonProto bool) {
	if jsonProto {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("x-amzn-RequestId", "sampled-empty")
		_, _ = io.WriteString(w, "{}")
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, `<?xml version="1.0"?><ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">`+
		`<ReceiveMessageResult/><ResponseMetadata><RequestId>sampled-empty</RequestId></ResponseMetadata></ReceiveMessageResponse>`)
}
