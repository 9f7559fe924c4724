package edge

import (
	"time"

	"tollgate/edge/balancer"
	"tollgate/edge/upstreamclient"
	"tollgate/edge/upstreamh2"
)

// newH2Transport is the HTTP/2 pool of one upstream server (a route's upstream.protocol
// h2): the edge's dialer, so the operator's address rule holds on every connect as for
// HTTP/1.1 targets, and the HTTP/1.1 pools' bounds, as requests in flight.
func (e *Edge) newH2Transport(tlsOn bool, hostport string, connectTimeout time.Duration) *upstreamh2.Transport {
	return upstreamh2.New(upstreamh2.Config{
		Addr:           hostport,
		TLS:            tlsOn,
		Dial:           e.dialer.Dial(connectTimeout),
		ConnectTimeout: connectTimeout,
		MaxInFlight:    e.cfg.MaxConnsPerTarget,
		MaxWait:        e.cfg.MaxConnWait,
		IdleTimeout:    e.cfg.MaxIdleConnDuration,
		HeaderTable:    e.cfg.HTTP2HeaderTable,
		GoTransport:    e.cfg.HTTP2GoClient,
	})
}

var (
	_ balancer.Transport = (*upstreamh2.Transport)(nil)
	_ balancer.Transport = (*upstreamclient.Client)(nil)
	_ meteredBody        = (*upstreamh2.ResponseBody)(nil)
)
