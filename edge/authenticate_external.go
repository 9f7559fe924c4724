package edge

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"tollgate/edge/extauth"
	"tollgate/edge/hdrclass"
	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// External authorizers (auth "external"): the tenant's own HTTPS service decides on each
// request, as AWS's Lambda authorizers, Envoy's ext_authz and forward-auth do; the
// exchange, the answers it accepts and their cache are package extauth's.
//   - allow: the request goes on as the consumer named (by id or name; limits, quotas,
//     metering and access rules per consumer as with key auth; none named: the tenant's
//     limits and consumer-less metering), with the answer's headers set upstream;
//   - deny: the authorizer's 4xx and message in the envelope (401: unauthenticated
//     without any forwarded header, else invalid_credential; 403: forbidden; another
//     4xx: authorizer_denied);
//   - anything else fails closed, 503 authorizer_failed, never cached, counted by reason
//     in tollgate_edge_external_auth_failures_total.
// A cached answer costs a SHA-256 of the forwarded headers' values and a lock-free
// lookup, and allocates nothing.

var authzReplies = func() (r [extauth.NumReasons]*reply) {
	for i, m := range [extauth.NumReasons]string{"did not answer in time", "is at an address the operator's policy refuses",
		"could not be reached", "has all its connections busy", "answered with an error", "answered with more than the gateway reads",
		"gave an answer the gateway cannot use", "named a consumer this API does not have"} {
		r[i] = newReply(tenants.EAuthorizerFailed, "the API's authorizer "+m+"; the call was refused")
	}
	return r
}()

func (e *Edge) initExternalAuth() (err error) {
	e.authz, err = extauth.NewMetrics(e.cfg.Registry)
	return err
}

// authorizer is a route's compiled external_auth and the key of its pool in the
// tenant's pools.
type authorizer struct {
	*extauth.Authorizer
	poolKey string
}

// newAuthorizer compiles r's external_auth, its pool taken from (or added to) c's.
func (e *Edge) newAuthorizer(conf *tenantConfig, r *tenants.Route, c *compiled) (*authorizer, error) {
	spec := r.ExternalAuth
	if spec == nil {
		return nil, fmt.Errorf("auth external without external_auth")
	}
	u, err := url.Parse(spec.URL)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("external_auth.url %q is not an https:// URL", spec.URL)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	hostport := net.JoinHostPort(u.Hostname(), port)
	timeout := time.Duration(spec.TimeoutMS) * time.Millisecond
	key := "authorizer " + poolKey(true, hostport, timeout)
	pool, _ := c.pools[key].(*upstreamclient.Client)
	if pool == nil {
		pool = upstreamclient.New(upstreamclient.Config{Addr: hostport, TLS: true, RootCAs: e.cfg.AuthorizerRootCAs,
			Dial: e.dialer.Dial(timeout), MaxConns: e.cfg.MaxConnsPerTarget, MaxIdle: e.cfg.MaxIdleConnDuration,
			MaxWait: e.cfg.MaxConnWait, Stream: true}) // Stream: a long answer is read up to extauth.MaxAnswer, not whole
		c.pools[key] = pool
	}
	a := &authorizer{extauth.New(spec, pool, u.Host, u.EscapedPath(), conf.Slug, r.Name, ownedHeader), key}
	if a.TTL > 0 {
		if c.authzEntries == nil {
			c.authzEntries = &atomic.Int64{}
		}
		a.Cache = extauth.NewCache(extauth.Budget{Tenant: c.authzEntries, Total: &e.authz.Cached,
			MaxTenant: int64(e.cfg.AuthCacheEntriesPerTenant), MaxTotal: int64(e.cfg.AuthCacheEntries)})
	}
	return a, nil
}

// ownedHeader: a header the edge sets or removes itself, which an authorizer may not set.
func ownedHeader(k []byte) bool {
	return hdrclass.Classify(k) != hdrclass.Other || hdrclass.SpoofsEdge(k) || hdrclass.IsEdgeHeader(strings.ToLower(string(k)))
}

// release gives back the budget a's cache holds (a route dropped, or its tenant).
func (a *authorizer) release() {
	if a != nil && a.Cache != nil {
		a.Cache.Drop()
	}
}

// externalAuthStep asks the route's authorizer about the request, or takes its cached
// answer.
func (e *Edge) externalAuthStep(rt *route, next handler) handler {
	a, conf, m := rt.authz, rt.snapshot, e.authz
	return func(x *exchange) {
		h := &x.ctx.Request.Header
		var key [32]byte
		key, x.scratch = a.Key(h, x.scratch)
		var now int64
		if a.Cache != nil {
			now = x.ctx.Time().UnixNano()
			if v := a.Cache.Get(&key, now); v != nil {
				if !v.Allow {
					m.CachedDeny.Inc()
					x.fail(v.Rendered.(*reply))
					return
				}
				if c, ok := conf.consumerOf(v.Rendered.(string)); ok {
					m.CachedAllow.Inc()
					x.allowExternal(v, c)
					next(x)
					return
				} // the consumer is gone since: ask again
			}
		}
		v, reason, err := a.ask(x, conf, &key, now)
		if err != nil {
			m.Fail(reason)
			if e.debug {
				e.log.Debug("edge: external authorizer failed", "tenant", conf.Slug, "route", rt.name,
					"request_id", string(x.reqID), "reason", extauth.Reasons[reason], "err", err)
			}
			x.fail(authzReplies[reason])
			return
		}
		if !v.Allow {
			m.Deny.Inc()
			x.fail(v.Rendered.(*reply))
			return
		}
		c, ok := conf.consumerOf(v.Rendered.(string))
		if !ok { // named by an exchange another snapshot's request led, and gone since
			m.Fail(extauth.UnknownConsumer)
			x.fail(authzReplies[extauth.UnknownConsumer])
			return
		}
		m.Allow.Inc()
		x.allowExternal(v, c)
		next(x)
	}
}

// ask asks the authorizer about x's request (with a cache: once for concurrent requests
// with the same key) and returns the verdict finished (Rendered: the consumer's id, or
// the denial's envelope) and cached.
func (a *authorizer) ask(x *exchange, conf *tenantConfig, key *[32]byte, now int64) (*extauth.Verdict, extauth.Reason, error) {
	h := &x.ctx.Request.Header
	exchange := func() (*extauth.Verdict, extauth.Reason, error) {
		req := extauth.Request{Method: string(h.Method()), Path: string(x.path), Host: string(x.host), Query: string(x.query), RequestID: string(x.reqID)}
		if ip := peerIP(x.ctx); ip != nil {
			req.SourceIP = ip.String()
		}
		v, reason, err := a.Ask(h, &req, x.reqID)
		if err != nil {
			return nil, reason, err
		}
		if v.Allow {
			v.Rendered = ""
			if v.Consumer != "" {
				c := conf.consumerNamed([]byte(v.Consumer))
				if c == nil {
					return nil, extauth.UnknownConsumer, fmt.Errorf("consumer %q", v.Consumer)
				}
				v.Rendered = c.ID
			}
		} else {
			v.Rendered = denyReply(v.Status, v.Message, a.HasCredential(h))
		}
		v.Key = *key
		if a.Cache != nil && v.Expires > 0 {
			v.Expires += now
			a.Cache.Put(v, now)
		}
		return v, 0, nil
	}
	if a.Cache == nil {
		return exchange()
	}
	return a.Cache.Do(key, exchange)
}

// consumerOf resolves a cached consumer id ("": none, ok).
func (s *tenantConfig) consumerOf(id string) (*Consumer, bool) {
	if id == "" {
		return nil, true
	}
	c := s.consumers[id]
	return c, c != nil
}

// allowExternal lets the request go on as an allowing answer says.
func (x *exchange) allowExternal(v *extauth.Verdict, c *Consumer) {
	h := &x.ctx.Request.Header
	for i := range v.Headers {
		h.SetCanonical(v.Headers[i].Name, v.Headers[i].Value)
	}
	x.consumer = c
}

// denyReply renders a denial: the authorizer's status and message in the envelope.
func denyReply(status int, message string, credential bool) *reply {
	code := tenants.EAuthorizerDenied
	switch {
	case status == 401 && credential:
		code = tenants.EInvalidCredential
	case status == 401:
		code = tenants.EUnauthenticated
	case status == 403:
		code = tenants.EForbidden
	}
	if message == "" {
		message = "the API's authorizer refused the call"
	}
	r := newReply(code, message)
	r.status = status
	return r
}
