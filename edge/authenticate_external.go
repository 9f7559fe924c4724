package edge

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// External authorizers: a route with auth "external" asks the tenant's own HTTPS
// service about each request, the way AWS's Lambda authorizers, Envoy's ext_authz and
// forward-auth proxies do.
//
// The edge POSTs {"tenant","route","method","path","host","query","source_ip",
// "request_id","headers":{name: value}} (the route's external_auth.headers only; a
// header the request lacks is left out) to external_auth.url and reads the answer
// (parseAuthAnswer):
//   - 200 {"allow": true, "consumer": "<id or name>", "headers": {...}, "ttl_s": n}:
//     the request goes on as the named consumer (limits, quotas, metering and access
//     rules per consumer, as with key auth; none named: the tenant's limits and
//     consumer-less metering), with the headers set on the upstream request;
//   - 200 {"allow": false, "status": 4xx, "message": "..."}: the client gets that
//     status (default 403) with the envelope and the authorizer's message;
//   - anything else (another status, a body that is not such JSON or is over 64 KiB, a
//     header the edge owns, a consumer the tenant does not have, a timeout, a refused
//     or failed connection, an address the operator's rule refuses) fails closed: 503
//     authorizer_failed, counted by reason in tollgate_edge_external_auth_failures_total,
//     never cached.
//
// Answers are cached per route by a SHA-256 of the forwarded headers' values (never the
// values themselves): allowing ones for cache_ttl_s, denying ones for deny_cache_ttl_s,
// either overridden by the answer's ttl_s (at most 3600 s). A cache is a fixed table of
// atomic pointers, so a hit takes no lock and allocates nothing; it goes with its route
// entry, so a change of the route's config forgets it. Entries are bounded per tenant
// and per edge (Config.AuthCacheEntries*): when a budget is full, new answers are not
// cached.
//
// The connection goes through the edge's dialer (the operator's address rule checked on
// every resolved address before connecting), over a keep-alive pool per tenant and
// authorizer host, with TLS verified against the system's roots (Config.AuthorizerRootCAs).

// Limits of the exchange with an authorizer.
const (
	maxAuthAnswer      = 64 << 10
	maxAuthHeaders     = 32
	maxAuthHeaderValue = 4 << 10
	maxAuthMessage     = 1 << 10
	maxAuthConsumer    = 256
	authCacheSlots     = 4096 // per route, allocated on the first answer cached
)

// Results of tollgate_edge_external_auth_total, and reasons of its failures.
const (
	authzAllow = iota
	authzDeny
	authzCachedAllow
	authzCachedDeny
	authzFailed
	numAuthzResults
)

var authzResults = [numAuthzResults]string{"allow", "deny", "cached_allow", "cached_deny", "failed"}

const (
	authzTimeout = iota
	authzRefusedAddress
	authzUnreachable
	authzBusy
	authzBadStatus
	authzTooLarge
	authzBadAnswer
	authzUnknownConsumer
	numAuthzReasons
)

var authzReasons = [numAuthzReasons]string{"timeout", "refused_address", "unreachable", "busy", "status", "too_large", "bad_answer", "unknown_consumer"}

// The client is told what failed in the gateway's terms, never the authorizer's detail.
var authzReplies = [numAuthzReasons]*reply{
	authzTimeout:         newReply(tenants.EAuthorizerFailed, "the API's authorizer did not answer in time; the call was refused"),
	authzRefusedAddress:  newReply(tenants.EAuthorizerFailed, "the API's authorizer is at an address the operator's policy refuses; the call was refused"),
	authzUnreachable:     newReply(tenants.EAuthorizerFailed, "the API's authorizer could not be reached; the call was refused"),
	authzBusy:            newReply(tenants.EAuthorizerFailed, "all connections to the API's authorizer are busy; the call was refused"),
	authzBadStatus:       newReply(tenants.EAuthorizerFailed, "the API's authorizer answered with an error; the call was refused"),
	authzTooLarge:        newReply(tenants.EAuthorizerFailed, "the API's authorizer answered with more than the gateway reads; the call was refused"),
	authzBadAnswer:       newReply(tenants.EAuthorizerFailed, "the API's authorizer gave an answer the gateway cannot use; the call was refused"),
	authzUnknownConsumer: newReply(tenants.EAuthorizerFailed, "the API's authorizer named a consumer this API does not have; the call was refused"),
}

// authzMetrics counts authorizer decisions and failures.
type authzMetrics struct {
	results  [numAuthzResults]prometheus.Counter
	failures [numAuthzReasons]prometheus.Counter
	total    atomic.Int64 // cache entries of every tenant (Config.AuthCacheEntries)
}

func (e *Edge) initExternalAuth() error {
	rv := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_edge_external_auth_total",
		Help: "Requests of routes with an external authorizer, by result (allow, deny, cached_allow, cached_deny, failed).",
	}, []string{"result"})
	fv := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_edge_external_auth_failures_total",
		Help: "External authorizer exchanges that failed closed (503 authorizer_failed), by reason.",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{rv, fv} {
		if err := e.cfg.Registry.Register(c); err != nil {
			return err
		}
	}
	e.authz = &authzMetrics{}
	for i, r := range authzResults {
		e.authz.results[i] = rv.WithLabelValues(r)
	}
	for i, r := range authzReasons {
		e.authz.failures[i] = fv.WithLabelValues(r)
	}
	return nil
}

// authorizer is a route's compiled external_auth.
type authorizer struct {
	client   *upstreamclient.Client
	poolKey  string // of client in the tenant's pools
	host     []byte // Host of the request to the authorizer
	target   []byte // its request target (the URL's path)
	headers  [][]byte
	names    []string // headers as strings, for the JSON body
	timeout  time.Duration
	ttl      int64 // ns; 0: allowing answers are not cached
	denyTTL  int64
	tenant   string
	route    string
	cache    *authCache // nil: nothing is cached
	m        *authzMetrics
	maxTotal int64
}

// newAuthorizer compiles r's external_auth, taking its pool from (or adding it to) the
// tenant's pools.
func (e *Edge) newAuthorizer(conf *tenantConfig, r *tenants.Route, c *compiled) (*authorizer, error) {
	spec := r.ExternalAuth
	if spec == nil {
		return nil, errors.New("auth external without external_auth")
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
	hc := c.pools[key]
	if hc == nil {
		hc = upstreamclient.New(upstreamclient.Config{
			Addr:     hostport,
			TLS:      true,
			RootCAs:  e.cfg.AuthorizerRootCAs,
			Dial:     e.dialer.Dial(timeout),
			MaxConns: e.cfg.MaxConnsPerTarget,
			MaxIdle:  e.cfg.MaxIdleConnDuration,
			MaxWait:  e.cfg.MaxConnWait,
			// Answers over maxBufferedBody, or chunked, arrive as a stream read up to
			// maxAuthAnswer; the rest whole.
			Stream: true,
		})
		c.pools[key] = hc
	}
	target := u.EscapedPath()
	if target == "" {
		target = "/"
	}
	a := &authorizer{
		client: hc, poolKey: key, host: []byte(u.Host), target: []byte(target),
		timeout: timeout, tenant: conf.Slug, route: r.Name, m: e.authz,
		maxTotal: int64(e.cfg.AuthCacheEntries),
	}
	for _, h := range spec.Headers {
		a.headers = append(a.headers, []byte(h))
		a.names = append(a.names, h)
	}
	if spec.CacheTTLS != nil {
		a.ttl = int64(*spec.CacheTTLS) * int64(time.Second)
	}
	if spec.DenyCacheTTLS != nil {
		a.denyTTL = int64(*spec.DenyCacheTTLS) * int64(time.Second)
	}
	if a.ttl > 0 {
		if c.authzEntries == nil {
			c.authzEntries = &atomic.Int64{}
		}
		a.cache = &authCache{tenant: c.authzEntries, maxTenant: int64(e.cfg.AuthCacheEntriesPerTenant)}
	}
	return a, nil
}

// release gives back what a's cache holds of the budgets; a route dropped by a compile
// (releaseRoute) or with its tenant calls it.
func (a *authorizer) release() {
	if a != nil && a.cache != nil {
		a.cache.drop(&a.m.total)
	}
}

// authVerdict is one answer of an authorizer, as cached. Immutable once stored.
type authVerdict struct {
	key      [32]byte
	expires  int64 // Unix ns
	allow    bool
	consumer string // the consumer's id; "": none named
	headers  []authHeader
	deny     *reply
}

type authHeader struct{ name, value []byte }

// authCache is a route's answers: a table of authCacheSlots atomic pointers, each key
// in one of two neighbouring slots, so reading takes no lock and allocates nothing.
// Writes (after an exchange with the authorizer, a network round trip) take mu.
type authCache struct {
	table     atomic.Pointer[[authCacheSlots]atomic.Pointer[authVerdict]]
	mu        sync.Mutex
	used      int64 // slots filled, under mu
	dropped   bool  // under mu
	tenant    *atomic.Int64
	maxTenant int64
}

func authSlot(key *[32]byte) uint64 {
	return binary.LittleEndian.Uint64(key[:8]) & (authCacheSlots - 1) &^ 1
}

// get returns the live answer for key, or nil.
func (c *authCache) get(key *[32]byte, now int64) *authVerdict {
	t := c.table.Load()
	if t == nil {
		return nil
	}
	i := authSlot(key)
	for j := i; j < i+2; j++ {
		if v := t[j].Load(); v != nil && v.key == *key && now < v.expires {
			return v
		}
	}
	return nil
}

// put stores v in one of its key's two slots: the one holding the same key, else an
// empty one, else an expired one, else the one expiring first. A new entry needs room
// in the tenant's and the edge's budgets, else v is not cached.
func (c *authCache) put(v *authVerdict, now int64, total *atomic.Int64, maxTotal int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	t := c.table.Load()
	if t == nil {
		t = new([authCacheSlots]atomic.Pointer[authVerdict])
		c.table.Store(t)
	}
	i := authSlot(&v.key)
	a, b := t[i].Load(), t[i+1].Load()
	var j uint64
	switch {
	case a != nil && a.key == v.key:
		j = i
	case b != nil && b.key == v.key:
		j = i + 1
	case a == nil:
		j = i
	case b == nil:
		j = i + 1
	case a.expires <= now || a.expires <= b.expires:
		j = i
	default:
		j = i + 1
	}
	if t[j].Load() == nil {
		if c.tenant.Load() >= c.maxTenant || total.Load() >= maxTotal {
			return
		}
		c.tenant.Add(1)
		total.Add(1)
		c.used++
	}
	t[j].Store(v)
}

// drop forgets the cache and returns its entries to the budgets.
func (c *authCache) drop(total *atomic.Int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	c.dropped = true
	c.tenant.Add(-c.used)
	total.Add(-c.used)
	c.used = 0
	c.table.Store(nil)
}

// key hashes the values of the route's forwarded headers, each with its length (and
// absent told from empty), in x.scratch.
func (a *authorizer) key(x *exchange) [32]byte {
	b := x.scratch[:0]
	h := &x.ctx.Request.Header
	for _, name := range a.headers {
		v := h.PeekBytes(name)
		n := uint32(0)
		if v != nil {
			n = uint32(len(v)) + 1
		}
		b = binary.LittleEndian.AppendUint32(b, n)
		b = append(b, v...)
	}
	x.scratch = b
	return sha256.Sum256(b)
}

// externalAuthStep asks the route's authorizer about the request, or takes its cached
// answer.
func (e *Edge) externalAuthStep(rt *route, next handler) handler {
	a, conf := rt.authz, rt.snapshot
	m := e.authz
	return func(x *exchange) {
		key := a.key(x)
		var now int64
		if a.cache != nil {
			now = x.ctx.Time().UnixNano()
			if v := a.cache.get(&key, now); v != nil {
				if v.allow {
					if c, ok := conf.consumerOf(v.consumer); ok {
						m.results[authzCachedAllow].Inc()
						x.allowExternal(v, c)
						next(x)
						return
					}
					// The consumer is gone since: ask again.
				} else {
					m.results[authzCachedDeny].Inc()
					x.fail(v.deny)
					return
				}
			}
		}
		v, reason, err := a.ask(x, conf)
		if err != nil {
			m.results[authzFailed].Inc()
			m.failures[reason].Inc()
			if e.debug {
				e.log.Debug("edge: external authorizer failed", "tenant", conf.Slug, "route", rt.name,
					"request_id", string(x.reqID), "reason", authzReasons[reason], "err", err)
			}
			x.fail(authzReplies[reason])
			return
		}
		v.key = key
		if a.cache != nil && v.expires > 0 {
			v.expires += now
			a.cache.put(v, now, &m.total, a.maxTotal)
		}
		if !v.allow {
			m.results[authzDeny].Inc()
			x.fail(v.deny)
			return
		}
		c, _ := conf.consumerOf(v.consumer)
		m.results[authzAllow].Inc()
		x.allowExternal(v, c)
		next(x)
	}
}

// consumerOf resolves a consumer id ("" : none, ok).
func (s *tenantConfig) consumerOf(id string) (*Consumer, bool) {
	if id == "" {
		return nil, true
	}
	c := s.consumers[id]
	return c, c != nil
}

// allowExternal lets the request go on as an allowing answer says.
func (x *exchange) allowExternal(v *authVerdict, c *Consumer) {
	h := &x.ctx.Request.Header
	for i := range v.headers {
		h.SetCanonical(v.headers[i].name, v.headers[i].value)
	}
	x.consumer = c
}

// authRequest is the body the edge sends an authorizer.
type authRequest struct {
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

// ask has one exchange with the authorizer and turns its answer into a verdict, whose
// expires is its TTL (0: not cached). On failure, reason says why.
func (a *authorizer) ask(x *exchange, conf *tenantConfig) (*authVerdict, int, error) {
	h := &x.ctx.Request.Header
	ar := authRequest{
		Tenant: a.tenant, Route: a.route, Method: string(h.Method()), Path: string(x.path),
		Host: string(x.host), Query: string(x.query), SourceIP: clientIP(x.ctx), RequestID: string(x.reqID),
		Headers: make(map[string]string, len(a.headers)),
	}
	for i, name := range a.headers {
		if v := h.PeekBytes(name); v != nil {
			ar.Headers[a.names[i]] = string(v)
		}
	}
	body, err := json.Marshal(&ar)
	if err != nil {
		return nil, authzBadAnswer, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetRequestURIBytes(a.target)
	req.Header.SetHostBytes(a.host)
	req.Header.SetContentTypeBytes(contentTypeJSON)
	req.Header.SetUserAgent("tollgate-authorizer")
	req.Header.SetCanonical(hdrRequestID, x.reqID)
	req.SetBodyRaw(body)
	err = a.client.DoTimeout(req, resp, a.timeout)
	if err != nil {
		_ = resp.CloseBodyStream()
		return nil, dialReason(err), err
	}
	var answer []byte
	if resp.IsBodyStream() {
		answer, err = io.ReadAll(io.LimitReader(resp.BodyStream(), maxAuthAnswer+1))
		_ = resp.CloseBodyStream()
		if err != nil {
			return nil, dialReason(err), err
		}
	} else {
		answer = resp.Body()
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, authzBadStatus, fmt.Errorf("status %d", resp.StatusCode())
	}
	if len(answer) > maxAuthAnswer {
		return nil, authzTooLarge, fmt.Errorf("answer over %d bytes", maxAuthAnswer)
	}
	ans, err := parseAuthAnswer(answer)
	if err != nil {
		return nil, authzBadAnswer, err
	}
	v := &authVerdict{allow: ans.Allow}
	ttl := a.denyTTL
	if ans.Allow {
		ttl = a.ttl
	}
	if ans.TTL != nil {
		ttl = int64(*ans.TTL) * int64(time.Second)
	}
	if a.ttl > 0 {
		v.expires = ttl
	}
	if !ans.Allow {
		v.deny = denyReply(ans.Status, ans.Message, hasAny(h, a.headers))
		return v, 0, nil
	}
	if ans.Consumer != "" {
		c := conf.consumers[ans.Consumer]
		if c == nil {
			c = conf.consumerByName(ans.Consumer)
		}
		if c == nil {
			return nil, authzUnknownConsumer, fmt.Errorf("consumer %q", ans.Consumer)
		}
		v.consumer = c.ID
	}
	for _, hd := range ans.Headers {
		v.headers = append(v.headers, authHeader{name: []byte(hd[0]), value: []byte(hd[1])})
	}
	return v, 0, nil
}

// consumerByName finds a consumer by name: a walk, on the miss path only.
func (s *tenantConfig) consumerByName(name string) *Consumer {
	for _, c := range s.consumers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func hasAny(h *fasthttp.RequestHeader, names [][]byte) bool {
	for _, n := range names {
		if h.PeekBytes(n) != nil {
			return true
		}
	}
	return false
}

func clientIP(ctx *fasthttp.RequestCtx) string {
	if ip := peerIP(ctx); ip != nil {
		return ip.String()
	}
	return ""
}

// dialReason classifies a failed exchange.
func dialReason(err error) int {
	var de *upstreamclient.DialError
	if errors.As(err, &de) {
		switch {
		case de.AddressRule:
			return authzRefusedAddress
		case de.TimedOut:
			return authzTimeout
		}
		return authzUnreachable
	}
	if errors.Is(err, fasthttp.ErrNoFreeConns) {
		return authzBusy
	}
	var te interface{ Timeout() bool }
	if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &te) && te.Timeout() {
		return authzTimeout
	}
	return authzUnreachable
}

// denyReply renders a denying answer: the authorizer's status and message in the
// envelope, with the code the status means at the edge.
func denyReply(status int, message string, credential bool) *reply {
	code := tenants.EAuthorizerDenied
	switch status {
	case fasthttp.StatusUnauthorized:
		code = tenants.EInvalidCredential
		if !credential {
			code = tenants.EUnauthenticated
		}
	case fasthttp.StatusForbidden:
		code = tenants.EForbidden
	}
	if message == "" {
		message = "the API's authorizer refused the call"
	}
	r := newReply(code, message)
	r.status = status
	return r
}

// authAnswer is an authorizer's answer, checked.
type authAnswer struct {
	Allow    bool
	Consumer string
	Headers  [][2]string // canonical names
	TTL      *int
	Status   int
	Message  string
}

// parseAuthAnswer reads an authorizer's 200 answer. Unknown fields are ignored, so an
// authorizer may say more than the edge reads; what the edge reads must be right.
func parseAuthAnswer(b []byte) (authAnswer, error) {
	var raw struct {
		Allow    *bool             `json:"allow"`
		Consumer string            `json:"consumer"`
		Headers  map[string]string `json:"headers"`
		TTL      *int              `json:"ttl_s"`
		Status   int               `json:"status"`
		Message  string            `json:"message"`
	}
	var a authAnswer
	if err := json.Unmarshal(b, &raw); err != nil {
		return a, fmt.Errorf("not the JSON object expected: %v", err)
	}
	if raw.Allow == nil {
		return a, errors.New(`no "allow"`)
	}
	a.Allow = *raw.Allow
	if raw.TTL != nil && (*raw.TTL < 0 || *raw.TTL > tenants.MaxAuthCacheTTLS) {
		return a, fmt.Errorf("ttl_s must be between 0 and %d", tenants.MaxAuthCacheTTLS)
	}
	a.TTL = raw.TTL
	if !a.Allow {
		a.Status = raw.Status
		if a.Status == 0 {
			a.Status = fasthttp.StatusForbidden
		}
		if a.Status < 400 || a.Status > 499 {
			return a, fmt.Errorf("status %d is not 4xx", a.Status)
		}
		if len(raw.Message) > maxAuthMessage || !utf8.ValidString(raw.Message) {
			return a, fmt.Errorf("message over %d bytes or not UTF-8", maxAuthMessage)
		}
		a.Message = raw.Message
		return a, nil
	}
	if len(raw.Consumer) > maxAuthConsumer || !utf8.ValidString(raw.Consumer) {
		return a, errors.New("consumer too long or not UTF-8")
	}
	a.Consumer = raw.Consumer
	if len(raw.Headers) > maxAuthHeaders {
		return a, fmt.Errorf("more than %d headers", maxAuthHeaders)
	}
	for k, v := range raw.Headers {
		if err := checkAuthHeader(k, v); err != nil {
			return a, err
		}
		a.Headers = append(a.Headers, [2]string{canonicalHeader(k), v})
	}
	return a, nil
}

// checkAuthHeader refuses a header an authorizer may not set: not a plain name, one
// the edge sets or removes itself (identity, forwarding, hop-by-hop, framing), or a
// value that could not travel in a header.
func checkAuthHeader(k, v string) error {
	if !plainHeaderName(k) {
		return fmt.Errorf("header %q is not a plain header name", k)
	}
	kb := []byte(k)
	if classify(kb) != clsOther || spoofsEdgeHeader(kb) || edgeHeaderFolds[strings.ToLower(k)] {
		return fmt.Errorf("header %q is the gateway's own", k)
	}
	if len(v) > maxAuthHeaderValue {
		return fmt.Errorf("header %q is over %d bytes", k, maxAuthHeaderValue)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("header %q has a control character", k)
		}
	}
	return nil
}

func plainHeaderName(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// canonicalHeader is k as fasthttp writes it (X-User-Id).
func canonicalHeader(k string) string {
	b := []byte(k)
	up := true
	for i, c := range b {
		switch {
		case up && c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !up && c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		up = c == '-'
	}
	return string(b)
}
