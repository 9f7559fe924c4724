package api

import (
	"time"

	"tollgate/tenants"
)

// Request bodies. The config objects (routes, consumers, plans, JWT issuers, domains, the
// access rules) are their domain types, tenants.Route and the others: a request may set every
// field but the read-only ones (decodeBody refuses those as unknown), and an update
// adds the version it is based on. The bodies below are the API's own: the tenant's
// (whose store keeps more than a client sends), and the few places where the API takes
// less than the domain type holds. The OpenAPI document is generated from these very
// structs. Tags: `required:"true"` and `doc:"..."` feed the document; `enum:"a,b"` lists
// allowed values; `readonly:"true"` marks what the server owns.

type tenantCreate struct {
	Slug string `json:"slug" required:"true" doc:"DNS label (a–z, 0–9, '-', at most 63), the first label of the tenant's edge host. Immutable."`
	Name string `json:"name" doc:"Display name, 1–100 printable characters. Default: the slug."`
	Plan string `json:"plan" doc:"Platform plan that caps the whole tenant: a name GET /v1/platform/plans lists (free, pro, enterprise, unlimited, or the operator's own). Default: free."`
	Cell string `json:"cell" doc:"The cell (edge pool) that serves the tenant, one GET /v1/cells lists. Default: the declared cell with the fewest tenants."`
}

// tenantPatch changes only the fields it carries.
type tenantPatch struct {
	Name    *string `json:"name" doc:"New display name."`
	Plan    *string `json:"plan" doc:"New platform plan. Only the admin token may change it."`
	Version *int64  `json:"version" doc:"The version the change is based on; or send If-Match."`
}

// planRateBody is a plan's rate: a plan has one mode, and its rate applies per consumer
// (per tenant for a platform plan). tenants.ConsumerPlan.Validate refuses a per or a mode too;
// this body makes them unknown fields, as the document shows (PlanRateLimitInput).
type planRateBody struct {
	RPS   int `json:"rps" doc:"Requests per second on average, 1–1000000. Set rps or rpm, not both."`
	RPM   int `json:"rpm" doc:"Requests per minute on average, 1–1000000, instead of rps."`
	Burst int `json:"burst" doc:"Largest burst (the bucket size). Default: the rate (rps or rpm)."`
}

// quotaBody is a platform plan's quota (platform.go). A tenant's plan takes a
// tenants.Quota, whose input schema has the same name and shape.
type quotaBody struct {
	Requests int64 `json:"requests" required:"true" doc:"Requests per calendar month (UTC)."`
}

// routeUpdate is a route as PUT takes it.
type routeUpdate struct {
	tenants.Route
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type consumerUpdate struct {
	tenants.Consumer
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

// planInput is a plan as the API takes it: its rate is only a rate, since a plan's rate
// counts per consumer and the plan has one mode for rate and quota.
type planInput struct {
	tenants.ConsumerPlan
	RateLimit *planRateBody `json:"rate_limit" doc:"Per-consumer rate. Default: none."`
}

type planUpdate struct {
	planInput
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

type tokenBody struct {
	Name string `json:"name" required:"true" doc:"What the token is for."`
	Role string `json:"role" enum:"admin,developer,viewer" doc:"Default: admin (everything within the tenant but deleting it). developer: read and change config, no keys or tokens. viewer: read only."`
}

// keyBody is the optional body of a key creation. expires_at is a string here, parsed
// by decodeKey, so a malformed time is a validation error on the field.
type keyBody struct {
	Label     string `json:"label" doc:"Tells the consumer's keys apart (\"ci\", \"laptop\"); up to 100 characters."`
	ExpiresAt string `json:"expires_at" doc:"When the edges stop taking the key (401 expired_key), in RFC 3339 (2027-01-31T00:00:00Z); in the future. Absent: it does not expire."`
}

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
	t := &tenants.Tenant{Slug: b.Slug, Name: b.Name, PlatformPlan: b.Plan, Cell: b.Cell}
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
		t.PlatformPlan = *p.Plan
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (b *planRateBody) domain() *tenants.RateLimit {
	if b == nil {
		return nil
	}
	return &tenants.RateLimit{RPS: b.RPS, RPM: b.RPM, Burst: b.Burst}
}

func decodeRoute(ct string, body []byte, limit int, p *tenants.UpstreamAddressRule) (*tenants.Route, error) {
	var r tenants.Route
	if err := decodeBody(ct, body, limit, &r, false); err != nil {
		return nil, err
	}
	if err := r.Validate(p); err != nil {
		return nil, err
	}
	return &r, nil
}

func decodeRouteUpdate(ct string, body []byte, limit int, p *tenants.UpstreamAddressRule) (*tenants.Route, *int64, error) {
	var b routeUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	if err := b.Route.Validate(p); err != nil {
		return nil, nil, err
	}
	return &b.Route, b.Version, nil
}

func decodeConsumer(ct string, body []byte, limit int) (*tenants.Consumer, error) {
	var c tenants.Consumer
	if err := decodeBody(ct, body, limit, &c, false); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func decodeConsumerUpdate(ct string, body []byte, limit int) (*tenants.Consumer, *int64, error) {
	var b consumerUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	if err := b.Consumer.Validate(); err != nil {
		return nil, nil, err
	}
	return &b.Consumer, b.Version, nil
}

func (b *planInput) plan() *tenants.ConsumerPlan {
	p := b.ConsumerPlan
	p.RateLimit = b.RateLimit.domain()
	return &p
}

func decodePlan(ct string, body []byte, limit int) (*tenants.ConsumerPlan, error) {
	var b planInput
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	p := b.plan()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func decodePlanUpdate(ct string, body []byte, limit int) (*tenants.ConsumerPlan, *int64, error) {
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

// decodeKey reads a key creation's body into a key that has no secret yet.
func decodeKey(ct string, body []byte, limit int, now time.Time) (*tenants.Key, error) {
	var b keyBody
	if err := decodeBody(ct, body, limit, &b, true); err != nil {
		return nil, err
	}
	k := &tenants.Key{Label: b.Label}
	if b.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339, b.ExpiresAt)
		if err != nil {
			return nil, tenants.Invalid("expires_at", "must be a time in RFC 3339, like 2027-01-31T00:00:00Z")
		}
		t = t.UTC()
		k.ExpiresAt = &t
	}
	if err := k.Validate(now); err != nil {
		return nil, err
	}
	return k, nil
}
