package api

import "tollgate/tenants"

// Request bodies. They mirror the domain types but are the API's own: the wire contract
// can then differ from storage (no ids or timestamps accepted, "version" only on updates),
// and the OpenAPI document is generated from these very structs. Tags: `required:"true"`
// and `doc:"..."` feed the document; `enum:"a,b"` lists allowed values.

type tenantCreate struct {
	Slug string `json:"slug" required:"true" doc:"DNS label (a–z, 0–9, '-', at most 63), the first label of the tenant's edge host. Immutable."`
	Name string `json:"name" doc:"Display name, 1–100 printable characters. Default: the slug."`
	Plan string `json:"plan" doc:"Platform plan that caps the whole tenant: a name GET /v1/platform/plans lists (free, pro, enterprise, unlimited, or the operator's own). Default: free."`
}

// tenantPatch changes only the fields it carries.
type tenantPatch struct {
	Name    *string `json:"name" doc:"New display name."`
	Plan    *string `json:"plan" doc:"New platform plan. Only the admin token may change it."`
	Version *int64  `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type targetBody struct {
	URL    string `json:"url" required:"true" doc:"http:// or https:// URL of one upstream server; no credentials, query or fragment."`
	Weight int    `json:"weight" doc:"Share of traffic, 0–1000 (0 drains the target). Default: equal shares."`
}

type upstreamBody struct {
	Targets        []targetBody            `json:"targets" required:"true" doc:"1–64 servers."`
	Balance        string                  `json:"balance" enum:"round_robin,least_conn,hash" doc:"How requests are spread: smooth weighted round-robin, fewest in flight relative to weight, or a consistent hash on hash_on. Default: round_robin."`
	HashOn         string                  `json:"hash_on" doc:"With balance hash: consumer (the client address when anonymous), ip, or header:<Name>. Default: consumer."`
	HealthCheck    *tenants.HealthCheck    `json:"health_check" doc:"Active check: GET path every interval_ms (default 5000, min 100), timeout_ms (default 1000); out after unhealthy_threshold failures in a row (default 3), back after healthy_threshold successes (default 2). Default: none."`
	Passive        *tenants.PassiveHealth  `json:"passive_health" doc:"Outlier ejection: failures in a row (connect error, timeout, 502/503/504; default 5) eject a target for eject_ms (default 30000). Default: none."`
	CircuitBreaker *tenants.CircuitBreaker `json:"circuit_breaker" doc:"Per target: open when error_percent (default 50) of at least min_requests (default 20) failed within window_ms (default 10000); stay open open_ms (default 30000), then let one trial through. Default: none."`
	Retries        *tenants.Retries        `json:"retries" doc:"Retry on another target up to attempts times (1–5, default 1): idempotent methods after any failure, others only when no connection was made; at most budget_percent (default 20) extra requests plus min_per_second (default 3). Default: none."`
}

func (b *upstreamBody) domain() tenants.Upstream {
	u := tenants.Upstream{
		Targets:        make([]tenants.Target, len(b.Targets)),
		Balance:        b.Balance,
		HashOn:         b.HashOn,
		HealthCheck:    b.HealthCheck,
		Passive:        b.Passive,
		CircuitBreaker: b.CircuitBreaker,
		Retries:        b.Retries,
	}
	for i, t := range b.Targets {
		u.Targets[i] = tenants.Target{URL: t.URL, Weight: t.Weight}
	}
	return u
}

type rateLimitBody struct {
	RPS   int    `json:"rps" doc:"Requests per second on average, 1–1000000. Set rps or rpm, not both."`
	RPM   int    `json:"rpm" doc:"Requests per minute on average, 1–1000000, instead of rps."`
	Burst int    `json:"burst" doc:"Largest burst (the bucket size). Default: the rate (rps or rpm)."`
	Per   string `json:"per" enum:"route,ip,consumer" doc:"What is counted: route (all its traffic together), ip (each client address; X-Forwarded-For only from trusted proxies) or consumer (each authenticated consumer; not with auth none). Default: route."`
	Mode  string `json:"mode" enum:"local,exact,approximate" doc:"Where it is counted across edges (see the README for each mode's error bound). Default: local for per ip; else approximate, or exact when burst < rate × 0.1 s + 1 (approximate with such a burst is refused)."`
}

// planRateBody is a plan's rate: a plan has one mode, and its rate applies per consumer
// (per tenant for a platform plan).
type planRateBody struct {
	RPS   int `json:"rps" doc:"Requests per second on average, 1–1000000. Set rps or rpm, not both."`
	RPM   int `json:"rpm" doc:"Requests per minute on average, 1–1000000, instead of rps."`
	Burst int `json:"burst" doc:"Largest burst (the bucket size). Default: the rate (rps or rpm)."`
}

type quotaBody struct {
	Requests int64 `json:"requests" required:"true" doc:"Requests per calendar month (UTC)."`
}

type routeBody struct {
	Name             string         `json:"name" required:"true" doc:"Unique within the tenant."`
	Paths            []string       `json:"paths" required:"true" doc:"1–32 path prefixes (\"/hello\" matches /hello and /hello/x) or exact paths (\"=/hello\")."`
	Methods          []string       `json:"methods" doc:"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS. Default: every method."`
	Upstream         upstreamBody   `json:"upstream" required:"true"`
	Auth             string         `json:"auth" enum:"none,key,jwt,key_or_jwt" doc:"Default: none."`
	Policy           bool           `json:"policy" doc:"Check the tenant's policy for this route."`
	RateLimit        *rateLimitBody `json:"rate_limit" doc:"Per-route limit. Default: none."`
	StripPrefix      bool           `json:"strip_prefix" doc:"Remove the matched prefix before proxying."`
	MaxBodyBytes     int64          `json:"max_body_bytes" doc:"Request body cap, 1–1073741824. Default: 10485760."`
	ConnectTimeoutMS int            `json:"connect_timeout_ms" doc:"Dial timeout, 1–300000 ms. Default: 2000."`
	TimeoutMS        int            `json:"timeout_ms" doc:"Whole upstream exchange, 1–300000 ms. Default: 30000."`
	WebSocket        bool           `json:"websocket" doc:"Let WebSocket upgrades through (auth, policy and limits apply at the upgrade); the tunnel closes after 10 idle minutes or 24 hours. Default: false."`

	Transform *tenants.Transform `json:"transform" doc:"Request header, JSON body and path rewrites, response header rewrites. Default: none."`
	Cache     *tenants.Cache     `json:"cache" doc:"Keep GET answers in the edge's memory for ttl_ms. Default: none."`
	Canary    *tenants.Canary    `json:"canary" doc:"Send part of the traffic to upstream (same settings as the route's): requests matching match (a header, or a JWT claim; any of values, or any value when values is empty) always, others by weight percent (0–100; an exact schedule, or a hash of sticky_on when sticky: consumer, ip or header:<Name>). Default: none."`
}

type routeUpdate struct {
	routeBody
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type consumerBody struct {
	Name string `json:"name" required:"true" doc:"Unique within the tenant."`
	Plan string `json:"plan" doc:"Name of one of the tenant's plans. Default: none."`
}

type consumerUpdate struct {
	consumerBody
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type planBody struct {
	Name        string        `json:"name" required:"true" doc:"Unique within the tenant: lowercase letters, digits, '-' and '_'."`
	RateLimit   *planRateBody `json:"rate_limit" doc:"Per-consumer rate. Default: none."`
	Quota       *quotaBody    `json:"quota" doc:"Per-consumer monthly quota. Default: none."`
	Concurrency int           `json:"concurrency" doc:"Concurrent requests per consumer; 0 = no cap."`
	Mode        string        `json:"mode" enum:"local,exact,approximate" doc:"Where the rate and quota are counted across edges (see the README for each mode's error bound). Default: approximate, or exact when burst < rate × 0.1 s + 1 (approximate with such a burst is refused)."`
}

type planUpdate struct {
	planBody
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type tokenBody struct {
	Name string `json:"name" required:"true" doc:"What the token is for."`
	Role string `json:"role" enum:"admin,developer,viewer" doc:"Default: admin (everything within the tenant but deleting it). developer: read and change config, no keys or tokens. viewer: read only."`
}

// keyBody is the optional body of a key creation: nothing yet, but an object is accepted
// so clients may always send one.
type keyBody struct{}

// Response bodies beyond the domain types.

type createdKey struct {
	*tenants.Key
	Plaintext string `json:"key" doc:"The key, shown only in this response: store it now."`
}

type createdToken struct {
	*tenants.Token
	Plaintext string `json:"token" doc:"The token, shown only in this response: store it now."`
}

type list[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor" doc:"Pass as ?cursor= for the next page; empty on the last page."`
}

type status struct {
	Status string `json:"status" doc:"ok, or ready."`
}

// Decoders. Each turns a body into a validated domain object (defaults filled) or a
// *tenants.Error; none may panic on any input (fuzzed).

func decodeTenantCreate(ct string, body []byte, limit int) (*tenants.Tenant, error) {
	var b tenantCreate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	t := &tenants.Tenant{Slug: b.Slug, Name: b.Name, Plan: b.Plan}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func decodeTenantPatch(ct string, body []byte, limit int) (*tenantPatch, error) {
	var b tenantPatch
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	return &b, nil
}

// apply returns cur with the patch's fields set, validated.
func (p *tenantPatch) apply(cur *tenants.Tenant) (*tenants.Tenant, error) {
	t := *cur
	if p.Name != nil {
		if *p.Name == "" {
			return nil, tenants.Invalid("name", "must not be empty (omit it to keep the current name)")
		}
		t.Name = *p.Name
	}
	if p.Plan != nil {
		if *p.Plan == "" {
			return nil, tenants.Invalid("plan", "must not be empty (omit it to keep the current plan)")
		}
		t.Plan = *p.Plan
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (b *routeBody) route() *tenants.Route {
	r := &tenants.Route{
		Name:             b.Name,
		Paths:            b.Paths,
		Methods:          b.Methods,
		Auth:             b.Auth,
		CheckAccess:      b.Policy,
		StripPrefix:      b.StripPrefix,
		MaxBodyBytes:     b.MaxBodyBytes,
		ConnectTimeoutMS: b.ConnectTimeoutMS,
		TimeoutMS:        b.TimeoutMS,
		WebSocket:        b.WebSocket,
		Transform:        b.Transform,
		Cache:            b.Cache,
		Canary:           b.Canary,
		Upstream:         b.Upstream.domain(),
	}
	r.RateLimit = b.RateLimit.domain()
	return r
}

func (b *rateLimitBody) domain() *tenants.RateLimit {
	if b == nil {
		return nil
	}
	return &tenants.RateLimit{RPS: b.RPS, RPM: b.RPM, Burst: b.Burst, Per: b.Per, Mode: b.Mode}
}

func (b *planRateBody) domain() *tenants.RateLimit {
	if b == nil {
		return nil
	}
	return &tenants.RateLimit{RPS: b.RPS, RPM: b.RPM, Burst: b.Burst}
}

func decodeRoute(ct string, body []byte, limit int, p *tenants.UpstreamAddressRule) (*tenants.Route, error) {
	var b routeBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	r := b.route()
	if err := r.Validate(p); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeRouteUpdate(ct string, body []byte, limit int, p *tenants.UpstreamAddressRule) (*tenants.Route, *int64, error) {
	var b routeUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	r := b.route()
	if err := r.Validate(p); err != nil {
		return nil, nil, err
	}
	return r, b.Version, nil
}

func (b *consumerBody) consumer() *tenants.Consumer {
	return &tenants.Consumer{Name: b.Name, Plan: b.Plan}
}

func decodeConsumer(ct string, body []byte, limit int) (*tenants.Consumer, error) {
	var b consumerBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	c := b.consumer()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeConsumerUpdate(ct string, body []byte, limit int) (*tenants.Consumer, *int64, error) {
	var b consumerUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	c := b.consumer()
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	return c, b.Version, nil
}

func (b *planBody) plan() *tenants.Plan {
	p := &tenants.Plan{Name: b.Name, Concurrency: b.Concurrency, RateLimit: b.RateLimit.domain(), Mode: b.Mode}
	if b.Quota != nil {
		p.Quota = &tenants.Quota{Requests: b.Quota.Requests}
	}
	return p
}

func decodePlan(ct string, body []byte, limit int) (*tenants.Plan, error) {
	var b planBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	p := b.plan()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func decodePlanUpdate(ct string, body []byte, limit int) (*tenants.Plan, *int64, error) {
	var b planUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	p := b.plan()
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	return p, b.Version, nil
}

func decodeToken(ct string, body []byte, limit int) (*tenants.Token, error) {
	var b tokenBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	t := &tenants.Token{Name: b.Name, Role: b.Role}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func decodeKey(ct string, body []byte, limit int) error {
	var b keyBody
	return decodeBody(ct, body, limit, &b, true)
}
