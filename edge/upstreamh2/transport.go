// Package upstreamh2 is the edge's HTTP/2 client to upstream servers (a route's
// upstream.protocol h2): a transport per target whose streams share few connections
// (Transport), and the bodies of one exchange, streamed both ways with the answer's
// trailer fields and gRPC's deadline and size rules (RequestBody, ResponseBody), and a
// gRPC-Web call translated to the gRPC one the upstream speaks and its answer back
// (GRPCWebRequest, ResponseBody.GRPCWeb). The connections are made by the dialer it is
// given, the edge's, which holds every connect to the operator's address rule. It knows
// nothing of tenants' routes, balancing or retries, which are the edge's.
//
// An http:// target is spoken to in h2c with prior knowledge (no Upgrade dance: gRPC
// servers expect the preface at once); an https:// one over TLS whose ALPN must pick h2.
// The package frames HTTP/2 itself (client.go, clientstream.go); Config.GoTransport has
// net/http's HTTP/2 transport speak instead, as before the own client.
//
// The edge's bound on an HTTP/1.1 target is its connections, waiting a while for one to
// free up; streams multiplexed over a few connections make that bound meaningless, so an
// HTTP/2 target's is the same number of requests in flight, with the same wait, and the
// same error past it (fasthttp.ErrNoFreeConns).
package upstreamh2

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
)

// Transport is the HTTP/2 pool of one target.
type Transport struct {
	t     *http.Transport // Go's, when Config.GoTransport
	own   *pool           // the edge's own client, otherwise
	addr  string          // host:port
	tls   bool
	slots chan struct{} // a token per request in flight
	wait  time.Duration // how long a request waits for a token
}

// Config is a Transport's target and bounds.
type Config struct {
	Addr           string // host:port
	TLS            bool
	Dial           func(addr string, timeout time.Duration) (net.Conn, error) // the edge's dialer (upstreamclient.Dialer)
	ConnectTimeout time.Duration
	MaxInFlight    int           // requests in flight at once; at least 1
	MaxWait        time.Duration // how long a request waits for its place
	IdleTimeout    time.Duration // an idle connection closes after it
	HeaderTable    uint32        // the requests' HPACK dynamic table, in bytes; 0: none
	GoTransport    bool          // speak through net/http's HTTP/2 transport, not the edge's own client (client.go)
}

// New is the HTTP/2 pool of one upstream server.
func New(cfg Config) *Transport {
	dial, hostport, tlsOn, connectTimeout := cfg.Dial, cfg.Addr, cfg.TLS, cfg.ConnectTimeout
	host, _, _ := net.SplitHostPort(hostport)
	h := &Transport{addr: hostport, tls: tlsOn, slots: make(chan struct{}, max(cfg.MaxInFlight, 1)), wait: cfg.MaxWait}
	if !cfg.GoTransport {
		h.own = &pool{cfg: cfg, host: host, h: h}
		return h
	}
	// net/http's transport, limited to HTTP/2: h2c with prior knowledge for a plain
	// target, ALPN h2 only for a TLS one (the code of golang.org/x/net/http2 that
	// net/http carries).
	var p http.Protocols
	if tlsOn {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	h.t = &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(hostport, dialTimeout(ctx, connectTimeout))
			if err != nil {
				return nil, err
			}
			return conn.BatchWrites(c, writeStall), nil
		},
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(hostport, dialTimeout(ctx, connectTimeout))
			if err != nil {
				return nil, err
			}
			c = conn.BatchWrites(c, writeStall)
			tc := tls.Client(c, &tls.Config{ServerName: host, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
			hctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			if err := tc.HandshakeContext(hctx); err != nil {
				_ = c.Close()
				return nil, &upstreamclient.DialError{Addr: hostport, TimedOut: hctx.Err() != nil, Err: err}
			}
			if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
				_ = tc.Close()
				return nil, &upstreamclient.DialError{Addr: hostport, Err: errors.New("the upstream does not speak HTTP/2 (ALPN chose " + p + ")")}
			}
			return tc, nil
		},
		// The answer goes to the client as the upstream sent it, compressed or not.
		DisableCompression: true,
		IdleConnTimeout:    cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{
			// A connection that stops answering is found by a PING, not by a request
			// that waits on it for the route's whole timeout.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     5 * time.Second,
			// Each request's own fields (X-Request-Id, traceparent) would enter the
			// table and evict another every time. Go reads 0 as its default, 4096; at
			// 1 byte no entry fits (each takes at least 32), so none is kept.
			MaxEncoderHeaderTableSize: int(max(cfg.HeaderTable, 1)),
		},
	}
	return h
}

// writeStall is how long a write to an upstream may make no progress before the
// connection is given up: as long as the transport waits for a PING's answer on an idle
// connection. The transport itself sets no write timeout; its connections' writes are
// batched (conn.BatchWrites), which needs one.
const writeStall = 30 * time.Second

// dialTimeout is the connect timeout, shortened by ctx's deadline.
func dialTimeout(ctx context.Context, connectTimeout time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < connectTimeout {
		return time.Until(d)
	}
	return connectTimeout
}

// acquire takes a token for one request: at once, or within the wait; else
// fasthttp.ErrNoFreeConns, which the edge answers 503 overloaded.
func (h *Transport) acquire(ctx context.Context) error {
	select {
	case h.slots <- struct{}{}:
		return nil
	default:
	}
	if h.wait <= 0 {
		return fasthttp.ErrNoFreeConns
	}
	t := time.NewTimer(h.wait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
		return nil
	case <-t.C:
		return fasthttp.ErrNoFreeConns
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Transport) release() { <-h.slots }

// Scheme is the URL scheme of the target.
func (h *Transport) Scheme() string {
	if h.tls {
		return "https"
	}
	return "http"
}

// Addr is the target's host:port.
func (h *Transport) Addr() string { return h.addr }

// RoundTrip sends r, holding a token until the answer's body is closed (or at once
// when it fails). The body it returns releases the token on Close.
func (h *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := h.acquire(r.Context()); err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, err
	}
	if h.own != nil {
		resp, err := h.own.roundTrip(r)
		if err != nil {
			h.release()
		}
		return resp, err // its body releases the token
	}
	resp, err := h.t.RoundTrip(r)
	if err != nil {
		h.release()
		return nil, h2Error(err)
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, h: h}
	return resp, nil
}

// h2Error unwraps what the transport wraps around a dial error, so the edge sorts it as
// for HTTP/1.1.
func h2Error(err error) error {
	var de *upstreamclient.DialError
	if errors.As(err, &de) {
		return de
	}
	return err
}

type releasingBody struct {
	io.ReadCloser
	h    *Transport
	done bool
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	if !b.done {
		b.done = true
		b.h.release()
	}
	return err
}

// DoAt sends a request built by fasthttp and reads the whole answer: the active health
// checks' exchange (the proxy streams its requests, with RoundTrip).
func (h *Transport) DoAt(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration, now int64) error {
	left := timeout - time.Duration(conn.MonoNow()-now)
	if left <= 0 {
		return fasthttp.ErrTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	u := &url.URL{Scheme: h.Scheme(), Host: h.addr}
	target := string(req.Header.RequestURI())
	if p, err := url.ParseRequestURI(target); err == nil {
		u.Path, u.RawPath, u.RawQuery = p.Path, p.RawPath, p.RawQuery
	} else {
		return err
	}
	method, body := string(req.Header.Method()), req.Body()
	grpcHealth := u.Path == grpcHealthCheck
	if grpcHealth {
		method, body = http.MethodPost, grpcHealthRequest
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Host = string(req.Header.Host())
	for k, v := range req.Header.All() {
		if hopRequest(k) {
			continue
		}
		r.Header.Add(string(k), string(v))
	}
	if grpcHealth {
		r.Header.Set("Content-Type", "application/grpc")
		r.Header.Set("Te", "trailers")
	}
	r.ContentLength = int64(len(body))
	res, err := h.RoundTrip(r)
	if err != nil {
		if ctx.Err() != nil {
			return fasthttp.ErrTimeout
		}
		return err
	}
	defer res.Body.Close()
	resp.SetStatusCode(res.StatusCode)
	for k, vs := range res.Header {
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		if ctx.Err() != nil {
			return fasthttp.ErrTimeout
		}
		return err
	}
	resp.SetBody(b)
	if grpcHealth {
		// A gRPC server answers 200 whatever the call's outcome: the check passes on
		// grpc-status 0 and a status of SERVING (field 1, value 1) only.
		status := res.Trailer.Get("Grpc-Status")
		if status == "" {
			status = res.Header.Get("Grpc-Status")
		}
		if res.StatusCode != http.StatusOK || status != "0" || !bytes.HasSuffix(b, grpcServing) {
			resp.SetStatusCode(http.StatusServiceUnavailable)
		}
	}
	return nil
}

// An active check whose path is the gRPC health service's Check method calls it (for
// the whole server: an empty service name) instead of sending a GET, which a gRPC
// server refuses.
const grpcHealthCheck = "/grpc.health.v1.Health/Check"

var (
	grpcHealthRequest = []byte{0, 0, 0, 0, 0}       // one uncompressed message, empty
	grpcServing       = []byte{0, 0, 0, 0, 2, 8, 1} // HealthCheckResponse{status: SERVING}
)

// DoTimeout is DoAt from now.
func (h *Transport) DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	return h.DoAt(req, resp, timeout, conn.MonoNow())
}

// CloseIdleConnections closes the connections with no stream.
func (h *Transport) CloseIdleConnections() {
	if h.own != nil {
		h.own.closeIdle()
		return
	}
	h.t.CloseIdleConnections()
}

// hopRequestH2: a request field that is not sent upstream over HTTP/2: the
// connection-specific ones HTTP/2 forbids (RFC 9113 8.2.2), Host (:authority) and the
// framing, which the transport writes itself.
func hopRequest(k []byte) bool {
	switch {
	case bytes.EqualFold(k, strConnectionH), bytes.EqualFold(k, strKeepAliveH), bytes.EqualFold(k, strProxyConnectionH),
		bytes.EqualFold(k, strTransferEncodingH), bytes.EqualFold(k, strUpgradeH), bytes.EqualFold(k, strContentLengthH),
		bytes.EqualFold(k, strHostH), bytes.EqualFold(k, strTEH), bytes.EqualFold(k, strTrailerH):
		return true
	}
	return false
}

var (
	strConnectionH       = []byte("Connection")
	strKeepAliveH        = []byte("Keep-Alive")
	strProxyConnectionH  = []byte("Proxy-Connection")
	strTransferEncodingH = []byte("Transfer-Encoding")
	strUpgradeH          = []byte("Upgrade")
	strContentLengthH    = []byte("Content-Length")
	strHostH             = []byte("Host")
	strTEH               = []byte("TE")
	strTrailerH          = []byte("Trailer")
)

// NewRequest is the upstream request, over this transport, of a client's request
// header h as the edge rewrote it: target is the request target to send (path and
// query), host the :authority. The connection-specific fields are left out, and TE:
// trailers is sent, which gRPC servers require. body is sent unless contentLength is 0.
func (h *Transport) NewRequest(ctx context.Context, rh *fasthttp.RequestHeader, target, host []byte, body io.ReadCloser, contentLength int64) (*http.Request, error) {
	u, err := h.targetURL(target)
	if err != nil {
		return nil, err
	}
	// The values are cut from one string and their slices from one array: two
	// allocations for the lot, not two per field.
	n, size := 0, 0
	for k, v := range rh.All() {
		if !hopRequest(k) {
			n, size = n+1, size+len(v)
		}
	}
	var sb strings.Builder
	sb.Grow(size)
	for k, v := range rh.All() {
		if !hopRequest(k) {
			sb.Write(v)
		}
	}
	all, off := sb.String(), 0
	vals := make([]string, n+1)
	header := make(http.Header, n+1)
	i := 0
	for k, v := range rh.All() {
		if hopRequest(k) {
			continue
		}
		vals[i] = all[off : off+len(v)]
		off += len(v)
		key := headerKey(k)
		if prev, ok := header[key]; ok {
			header[key] = append(prev, vals[i])
		} else {
			header[key] = vals[i : i+1 : i+1]
		}
		i++
	}
	vals[n] = "trailers"
	header["Te"] = vals[n : n+1 : n+1]
	r := &http.Request{
		Method:     string(rh.Method()),
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     header,
		Host:       string(host),
	}
	if body != nil && contentLength != 0 {
		r.Body, r.ContentLength = body, contentLength
	}
	return r.WithContext(ctx), nil
}

// targetURL is the URL of a request for target on this transport. The transport sends
// a URL's Opaque as :path, so a target is taken as it came, without the parse (and the
// unescaped copy of its path) that nothing here reads; a target that is not a path in
// origin form, or one that Opaque would send otherwise (starting "//"), is parsed.
func (h *Transport) targetURL(target []byte) (*url.URL, error) {
	if len(target) > 1 && target[0] == '/' && target[1] != '/' && validTarget(target) {
		u := &url.URL{Scheme: h.Scheme(), Host: h.addr}
		if i := bytes.IndexByte(target, '?'); i >= 0 {
			u.Opaque, u.RawQuery = string(target[:i]), string(target[i+1:])
			u.ForceQuery = u.RawQuery == ""
		} else {
			u.Opaque = string(target)
		}
		return u, nil
	}
	t, err := url.ParseRequestURI(string(target))
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: h.Scheme(), Host: h.addr, Path: t.Path, RawPath: t.RawPath, RawQuery: t.RawQuery}, nil
}

// validTarget says target has nothing url.ParseRequestURI would refuse or re-escape:
// visible ASCII, no '#', and every '%' followed by two hex digits. Anything else takes the
// parse, and its errors.
func validTarget(target []byte) bool {
	for i := 0; i < len(target); i++ {
		c := target[i]
		switch {
		case c <= ' ' || c >= 0x7f || c == '#':
			return false
		case c == '%':
			if i+2 >= len(target) || !isHex(target[i+1]) || !isHex(target[i+2]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// nameCache maps field names to another form of them (canonical, lower-case), so that a
// name is not made into a new string for every request: an immutable map, replaced whole
// when a name is added, up to maxHeaderKeys names (clients choose them). Callers look up
// in names() themselves, indexing with string(b) so that a []byte name costs no copy.
type nameCache struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex
}

const maxHeaderKeys = 512

func (c *nameCache) names() map[string]string {
	if m := c.m.Load(); m != nil {
		return *m
	}
	return nil
}

// add records k's form s, unless the cache is full.
func (c *nameCache) add(k, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]string{}
	if old := c.m.Load(); old != nil {
		if len(*old) >= maxHeaderKeys {
			return
		}
		m = maps.Clone(*old)
	}
	m[k] = s
	c.m.Store(&m)
}

// headerKeys holds the canonical names of the request fields seen so far.
var headerKeys nameCache

func headerKey(k []byte) string {
	if s, ok := headerKeys.names()[string(k)]; ok {
		return s
	}
	s := http.CanonicalHeaderKey(string(k))
	headerKeys.add(string(k), s)
	return s
}

// CopyHead sets resp's status and fields from res's; the length is the body's business.
func CopyHead(res *http.Response, resp *fasthttp.Response) {
	resp.SetStatusCode(res.StatusCode)
	for k, vs := range res.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
}
