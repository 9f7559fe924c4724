package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/balancer"
	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
)

// HTTP/2 to upstreams (a route's upstream.protocol h2): one h2Transport per target, its
// connections multiplexed, each request a stream.
//
// The connections are made by the edge's own dialer, so the operator's address rule
// is checked on every connect exactly as for HTTP/1.1 targets, and a refused or failed
// connect is the same *upstreamclient.DialError. An http:// target is spoken to in h2c
// with prior knowledge (no Upgrade dance: gRPC servers expect the preface at once); an
// https:// one over TLS whose ALPN must pick h2.
//
// The edge's bound on an HTTP/1.1 target is its connections (MaxConnsPerTarget, waiting
// MaxConnWait for one to free up); streams multiplexed over a few connections make that
// bound meaningless, so an HTTP/2 target's is the same number of requests in flight,
// with the same wait, and the same answer past it (503 overloaded).

// h2Transport is the HTTP/2 pool of one target.
type h2Transport struct {
	t     *http.Transport
	addr  string // host:port
	tls   bool
	slots chan struct{} // a token per request in flight
	wait  time.Duration // how long a request waits for a token
}

// newH2Transport is the HTTP/2 pool of one upstream server.
func (e *Edge) newH2Transport(tlsOn bool, hostport string, connectTimeout time.Duration) *h2Transport {
	dial := e.dialer.Dial(connectTimeout)
	host, _, _ := net.SplitHostPort(hostport)
	h := &h2Transport{addr: hostport, tls: tlsOn, slots: make(chan struct{}, max(e.cfg.MaxConnsPerTarget, 1)), wait: e.cfg.MaxConnWait}
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
			return dial(hostport, dialTimeout(ctx, connectTimeout))
		},
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(hostport, dialTimeout(ctx, connectTimeout))
			if err != nil {
				return nil, err
			}
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
		IdleConnTimeout:    e.cfg.MaxIdleConnDuration,
		HTTP2: &http.HTTP2Config{
			// A connection that stops answering is found by a PING, not by a request
			// that waits on it for the route's whole timeout.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}
	return h
}

// dialTimeout is the connect timeout, shortened by ctx's deadline.
func dialTimeout(ctx context.Context, connectTimeout time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < connectTimeout {
		return time.Until(d)
	}
	return connectTimeout
}

// acquire takes a token for one request: at once, or within the wait; else
// fasthttp.ErrNoFreeConns, which the edge answers 503 overloaded.
func (h *h2Transport) acquire(ctx context.Context) error {
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

func (h *h2Transport) release() { <-h.slots }

// scheme is the URL scheme of the target.
func (h *h2Transport) scheme() string {
	if h.tls {
		return "https"
	}
	return "http"
}

// roundTrip sends r, holding a token until the answer's body is closed (or at once
// when it fails). The body it returns releases the token on Close.
func (h *h2Transport) roundTrip(r *http.Request) (*http.Response, error) {
	if err := h.acquire(r.Context()); err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, err
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
	h    *h2Transport
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
// checks' exchange (the proxy streams, proxy_h2.go).
func (h *h2Transport) DoAt(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration, now int64) error {
	left := timeout - time.Duration(conn.MonoNow()-now)
	if left <= 0 {
		return fasthttp.ErrTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	u := &url.URL{Scheme: h.scheme(), Host: h.addr}
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
		if hopRequestH2(k) {
			continue
		}
		r.Header.Add(string(k), string(v))
	}
	if grpcHealth {
		r.Header.Set("Content-Type", "application/grpc")
		r.Header.Set("Te", "trailers")
	}
	r.ContentLength = int64(len(body))
	res, err := h.roundTrip(r)
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
func (h *h2Transport) DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	return h.DoAt(req, resp, timeout, conn.MonoNow())
}

// CloseIdleConnections closes the connections with no stream.
func (h *h2Transport) CloseIdleConnections() { h.t.CloseIdleConnections() }

// hopRequestH2: a request field that is not sent upstream over HTTP/2: the
// connection-specific ones HTTP/2 forbids (RFC 9113 8.2.2), Host (:authority) and the
// framing, which the transport writes itself.
func hopRequestH2(k []byte) bool {
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

var _ balancer.Transport = (*h2Transport)(nil)
var _ balancer.Transport = (*upstreamclient.Client)(nil)
