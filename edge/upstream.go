package edge

import (
	"strconv"
	"sync/atomic"
	"time"

	"tollgate/edge/balancer"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// upstream is a route's set of targets (package balancer) and what the tenant's compile
// keeps about it: the pools its targets use and whether routes share it.
type upstream struct {
	balancer.Upstream
	plain bool     // balancer's Plain, read by every request (proxyStep's fast path)
	h2    bool     // the targets speak HTTP/2 (upstream_h2.go)
	pools []string // keys of the pools the targets use

	// shareKey: a plain upstream every route of the tenant with the same targets and
	// connect timeout shares (sharedKey); "" for one of its route's own.
	shareKey string
}

// sharedKey is what identifies a plain upstream's spec among a tenant's routes, or ""
// when the spec is not plain: a plain upstream has no state of its route's (no health,
// no retries, no events to label), so routes that name the same targets share one, and
// its rotation. SetShareUpstreams(false) gives every route its own.
func sharedKey(spec *tenants.Upstream, ct time.Duration) string {
	if !shareUpstreams.Load() || spec.Balance != "" && spec.Balance != tenants.BalanceRoundRobin ||
		spec.HealthCheck != nil || spec.Passive != nil || spec.CircuitBreaker != nil || spec.Retries != nil {
		return ""
	}
	k := make([]byte, 0, 64)
	k = strconv.AppendInt(k, int64(ct), 10)
	k = append(k, spec.Protocol...)
	for _, t := range spec.Targets {
		k = append(k, ' ')
		k = append(k, t.URL...)
		k = append(k, ' ')
		k = strconv.AppendInt(k, int64(t.Weight), 10)
	}
	return string(k)
}

var shareUpstreams atomic.Bool

func init() { shareUpstreams.Store(true) }

// SetShareUpstreams chooses whether a tenant's routes with the same plain upstream share
// one upstream and its rotation (true, the default) or each has its own
// (TOLLGATE_EDGE_SHARE_UPSTREAMS=off), from the next compile on.
func SetShareUpstreams(on bool) { shareUpstreams.Store(on) }

// bind counts u's events (ejections, breaker opens, retries) under its route's metrics
// labels; a kept upstream is bound again by each compile, as its route's labels may
// have changed.
func (u *upstream) bind(rm *edgemetrics.RouteMetrics) { u.Bind(rm) }

// close stops u's active health checker, if it has one.
func (u *upstream) close() { u.Close() }

// hashKey is the ring position of x's request for a hash upstream; ok is false when the
// upstream does not hash or the request has no key (hash on a header it does not carry;
// it is then balanced round-robin). It must run before forwardHeaders, whose rewrite of
// X-Forwarded-For clientIP reads.
func hashKey(x *exchange, u *upstream) (h uint64, ok bool) {
	on, header := u.HashOn()
	switch on {
	case balancer.HashNone:
		return 0, false
	case balancer.HashConsumer:
		if c := x.consumer; c != nil {
			return balancer.Key(c.id), true
		}
		return balancer.Key(x.clientIP()), true
	case balancer.HashIP:
		return balancer.Key(x.clientIP()), true
	default:
		v := x.ctx.Request.Header.PeekBytes(header)
		if v == nil {
			return 0, false
		}
		return balancer.Key(v), true
	}
}

// poolKey names a connection pool: one per scheme, host:port and connect timeout within
// a tenant. Pools outlive snapshots so a recompile keeps the warm connections.
func poolKey(tls bool, hostport string, connectTimeout time.Duration) string {
	return poolKeyOf("", tls, hostport, connectTimeout)
}

// poolKeyOf is poolKey for a protocol: an HTTP/2 target's pool is not its HTTP/1.1 one.
func poolKeyOf(protocol string, tls bool, hostport string, connectTimeout time.Duration) string {
	s := "http://"
	if tls {
		s = "https://"
	}
	if protocol != "" {
		s = protocol + "+" + s
	}
	return s + hostport + "|" + connectTimeout.String()
}

// newUpstreamClient is the keep-alive pool of one upstream server.
func (e *Edge) newUpstreamClient(tlsOn bool, hostport string, connectTimeout time.Duration) *upstreamclient.Client {
	return upstreamclient.New(upstreamclient.Config{
		Addr:           hostport,
		TLS:            tlsOn,
		Dial:           e.dialer.Dial(connectTimeout),
		MaxConns:       e.cfg.MaxConnsPerTarget,
		MaxIdle:        e.cfg.MaxIdleConnDuration,
		MaxWait:        e.cfg.MaxConnWait,
		ReadBufferSize: e.cfg.ReadBufferSize,
		// Stream bodies from the upstream to the client instead of buffering them whole
		// (S5: 1 MB responses must not cost 1 MB of memory per request in flight): bodies
		// over the client's buffering bound or of unknown length stream, smaller ones are
		// read whole, and the connection returns to the pool once the body has been relayed.
		Stream: !e.cfg.BufferResponses,
	})
}

// newUpstream builds an upstream (a route's, or its canary's) from its validated
// settings, taking pools from (and adding them to) the tenant's pool set.
func (e *Edge) newUpstream(spec *tenants.Upstream, ct time.Duration, pools map[string]balancer.Transport, used map[string]bool) (*upstream, error) {
	u := &upstream{h2: spec.Protocol == tenants.ProtocolH2}
	o := balancer.Options{
		Pool: func(tlsOn bool, hostport string) balancer.Transport {
			key := poolKeyOf(spec.Protocol, tlsOn, hostport, ct)
			c := pools[key]
			if c == nil {
				if u.h2 {
					c = e.newH2Transport(tlsOn, hostport, ct)
				} else {
					c = e.newUpstreamClient(tlsOn, hostport, ct)
				}
				pools[key] = c
			}
			used[key] = true
			u.pools = append(u.pools, key)
			return c
		},
		// Until its route binds it (a checker may start with the compile): under none.
		Events:   e.labels.NoTenant,
		Checkers: &e.checkers,
	}
	if e.debug {
		o.Log = e.log
	}
	if err := u.Init(spec, o); err != nil {
		return nil, err
	}
	u.plain = u.Plain()
	return u, nil
}
