// Package extauth is the edge's client of tenants' external authorizers: the request it
// sends (Authorizer.Ask), the answer it accepts (ParseAnswer), and the cache of answers
// keyed by a hash of the forwarded credentials (Cache). It knows nothing of routes'
// chains, consumers or the edge's error envelope: the edge's step
// (edge/authenticate_external.go) turns a Verdict into the request's fate.
//
// The connection goes through the pool it is given (an upstreamclient.Client on the
// edge's dialer, so the operator's address rule is checked on every resolved address
// before connecting); anything but a well-formed 200 answer is a failure, with a Reason,
// and the edge fails closed on it.
package extauth

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// Limits of the exchange with an authorizer.
const (
	MaxAnswer      = 64 << 10
	maxHeaders     = 32
	maxHeaderValue = 4 << 10
	MaxMessage     = 1 << 10
	MaxConsumer    = 256
)

// Reason says why an exchange failed.
type Reason int

// Reasons of failure, in the order of Reasons.
const (
	Timeout Reason = iota
	RefusedAddress
	Unreachable
	Busy
	BadStatus
	TooLarge
	BadAnswer
	UnknownConsumer
	NumReasons
)

// Reasons are the metric labels of the reasons.
var Reasons = [NumReasons]string{"timeout", "refused_address", "unreachable", "busy", "status", "too_large", "bad_answer", "unknown_consumer"}

// Authorizer is one route's external_auth, compiled.
type Authorizer struct {
	Client  *upstreamclient.Client
	Host    []byte // Host of the request to the authorizer
	Target  []byte // its request target (the URL's path)
	Headers [][]byte
	names   []string
	Timeout time.Duration
	TTL     int64 // ns; 0: nothing is cached
	DenyTTL int64
	Tenant  string
	Route   string
	Owned   func(name []byte) bool // headers the edge sets or removes itself
	Cache   *Cache                 // nil: nothing is cached
}

// New compiles spec (validated). pool is the keep-alive pool to the URL's host.
func New(spec *tenants.ExternalAuth, pool *upstreamclient.Client, host, target, tenant, route string, owned func([]byte) bool) *Authorizer {
	a := &Authorizer{Client: pool, Host: []byte(host), Target: []byte(target), Timeout: time.Duration(spec.TimeoutMS) * time.Millisecond,
		Tenant: tenant, Route: route, Owned: owned}
	if len(a.Target) == 0 {
		a.Target = []byte("/")
	}
	for _, h := range spec.Headers {
		a.Headers = append(a.Headers, []byte(h))
		a.names = append(a.names, h)
	}
	if spec.CacheTTLS != nil {
		a.TTL = int64(*spec.CacheTTLS) * int64(time.Second)
	}
	if spec.DenyCacheTTLS != nil {
		a.DenyTTL = int64(*spec.DenyCacheTTLS) * int64(time.Second)
	}
	return a
}

// Key hashes the values of the forwarded headers, each with its length (absent told
// from empty), in scratch, which it returns grown.
func (a *Authorizer) Key(h *fasthttp.RequestHeader, scratch []byte) ([32]byte, []byte) {
	b := scratch[:0]
	for _, name := range a.Headers {
		v := h.PeekBytes(name)
		n := uint32(0)
		if v != nil {
			n = uint32(len(v)) + 1
		}
		b = binary.LittleEndian.AppendUint32(b, n)
		b = append(b, v...)
	}
	return sha256.Sum256(b), b
}

// HasCredential reports whether the request carries any of the forwarded headers.
func (a *Authorizer) HasCredential(h *fasthttp.RequestHeader) bool {
	for _, n := range a.Headers {
		if h.PeekBytes(n) != nil {
			return true
		}
	}
	return false
}

// Request is what the edge sends an authorizer (besides the forwarded headers).
type Request struct {
	Tenant    string            `json:"tenant"`
	Route     string            `json:"route"`
	Method    string            `json:"method"`
	Path      string            `json:"path"`
	Host      string            `json:"host"`
	Query     string            `json:"query"`
	SourceIP  string            `json:"source_ip"`
	RequestID string            `json:"request_id"`
	Headers   map[string]string `json:"headers"`
}

// Verdict is an authorizer's answer as the edge keeps it. Immutable once cached.
type Verdict struct {
	Key      [32]byte
	Expires  int64 // Unix ns; 0 from Ask: not to be cached, else the TTL to add to now
	Allow    bool
	Consumer string // as the authorizer named it (id or name); the edge resolves it
	Headers  []Header
	Status   int    // a denial's status (4xx)
	Message  string // a denial's message
	// Rendered is the caller's own form of the verdict (the edge: the consumer's id,
	// the denial's envelope), set before the verdict is cached.
	Rendered any
}

// Header is one header an allowing answer adds to the upstream request.
type Header struct{ Name, Value []byte }

// Ask has one exchange with the authorizer about the request r (whose Tenant, Route
// and Headers it fills in) and returns its verdict, or why it failed.
func (a *Authorizer) Ask(h *fasthttp.RequestHeader, r *Request, requestID []byte) (*Verdict, Reason, error) {
	r.Tenant, r.Route = a.Tenant, a.Route
	r.Headers = make(map[string]string, len(a.Headers))
	for i, name := range a.Headers {
		if v := h.PeekBytes(name); v != nil {
			r.Headers[a.names[i]] = string(v)
		}
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, BadAnswer, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetRequestURIBytes(a.Target)
	req.Header.SetHostBytes(a.Host)
	req.Header.SetContentType("application/json")
	req.Header.SetUserAgent("tollgate-authorizer")
	req.Header.Set("X-Request-Id", string(requestID))
	req.SetBodyRaw(body)
	if err = a.Client.DoTimeout(req, resp, a.Timeout); err != nil {
		_ = resp.CloseBodyStream()
		return nil, classify(err), err
	}
	answer := resp.Body()
	if resp.IsBodyStream() {
		answer, err = io.ReadAll(io.LimitReader(resp.BodyStream(), MaxAnswer+1))
		_ = resp.CloseBodyStream()
		if err != nil {
			return nil, classify(err), err
		}
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, BadStatus, fmt.Errorf("status %d", resp.StatusCode())
	}
	if len(answer) > MaxAnswer {
		return nil, TooLarge, fmt.Errorf("answer over %d bytes", MaxAnswer)
	}
	ans, err := ParseAnswer(answer, a.Owned)
	if err != nil {
		return nil, BadAnswer, err
	}
	v := &Verdict{Allow: ans.Allow, Consumer: ans.Consumer, Status: ans.Status, Message: ans.Message}
	ttl := a.DenyTTL
	if ans.Allow {
		ttl = a.TTL
	}
	if ans.TTL != nil {
		ttl = int64(*ans.TTL) * int64(time.Second)
	}
	if a.TTL > 0 {
		v.Expires = ttl
	}
	for _, hd := range ans.Headers {
		v.Headers = append(v.Headers, Header{Name: []byte(hd[0]), Value: []byte(hd[1])})
	}
	return v, 0, nil
}

// classify names the reason of a failed exchange.
func classify(err error) Reason {
	var de *upstreamclient.DialError
	if errors.As(err, &de) {
		switch {
		case de.AddressRule:
			return RefusedAddress
		case de.TimedOut:
			return Timeout
		}
		return Unreachable
	}
	if errors.Is(err, fasthttp.ErrNoFreeConns) {
		return Busy
	}
	var te interface{ Timeout() bool }
	if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &te) && te.Timeout() {
		return Timeout
	}
	return Unreachable
}
