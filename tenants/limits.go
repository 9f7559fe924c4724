package tenants

import (
	"context"
	"fmt"
	"time"
)

// Flow control settings: where a limit is counted (Mode) and what a route's limit
// counts (Per). The edge's limiter (edge/limit) documents each mode's error bound.
const (
	// ModeLocal: each edge enforces its share of the limit (limit ÷ live edges), with no
	// Redis traffic per request. Exact when the load balancer spreads a key evenly.
	ModeLocal = "local"
	// ModeExact: one atomic check in Redis per request; the limit holds across any
	// number of edges.
	ModeExact = "exact"
	// ModeApproximate: edges admit locally and sync counts with Redis every 100 ms; the
	// cluster may admit a bounded amount more than the limit (never less).
	ModeApproximate = "approximate"

	// PerRoute: one bucket for all of a route's traffic.
	PerRoute = "route"
	// PerIP: one bucket per client address (X-Forwarded-For honoured from trusted
	// proxies only).
	PerIP = "ip"
	// PerConsumer: one bucket per authenticated consumer of the route.
	PerConsumer = "consumer"
)

// Platform plan names every installation has (migration 00003). Unlimited has no limits:
// tests and local experiments use it.
const (
	PlatformFree       = "free"
	PlatformPro        = "pro"
	PlatformEnterprise = "enterprise"
	PlatformUnlimited  = "unlimited"
)

// MaxQuota bounds a monthly quota.
const MaxQuota = int64(1) << 40

// PlatformPlan is one of the operator's plans. A tenant's PlatformPlan names one, and
// its limits cap the whole tenant: every consumer and route of the tenant together.
// Tenants' own plans (ConsumerPlan) are for their API consumers.
type PlatformPlan struct {
	Name        string     `json:"name"`
	RateLimit   *RateLimit `json:"rate_limit,omitempty"`
	Quota       *Quota     `json:"quota,omitempty"`
	Concurrency int        `json:"concurrency"` // 0 = no cap
	Mode        string     `json:"mode,omitempty"`
	// Resources bounds what the tenant keeps in the shared store and on the shared edges.
	// Validate fills a nil Resources with the ceilings; the edge reads a nil one (an
	// entry written before resources existed) as "bounded by the edge's own budget only".
	Resources *ResourceLimits `json:"resources,omitempty"`
	// Logs is what the plan's tenants get of the request log; nil: the defaults.
	Logs      *LogPolicy `json:"logs,omitempty"`
	Version   int64      `json:"version"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ResourceLimits are a platform plan's bounds on the objects a tenant may keep. They are
// checked when an object is saved (the store counts under a lock of the tenant row, so
// two concurrent creations at the limit cannot both pass); lowering one keeps what a
// tenant has over it and refuses only what would add to it. 0 allows none.
type ResourceLimits struct {
	Routes          int `json:"routes"`
	Consumers       int `json:"consumers"`
	KeysPerConsumer int `json:"keys_per_consumer"`
	// ConsumerPlans counts the tenant's consumer plans (POST /v1/tenants/{slug}/plans).
	ConsumerPlans int `json:"plans"`
	Domains       int `json:"domains"`
	JWTIssuers    int `json:"jwt_issuers"`
	// AccessRules bounds the rules and the role links of the tenant's access rules together:
	// each [subject, path, action] rule and each [member, role] link counts one, since
	// both cost the edges memory and compile time alike.
	AccessRules int `json:"policy_rules"`
	// CacheBytes is the most the tenant's answers may hold of each edge's response cache
	// (bodies, headers, keys and a fixed overhead per answer). 0: routes may not cache.
	CacheBytes int64 `json:"cache_bytes"`
	// Functions counts the function names the tenant keeps (each with its versions).
	Functions int `json:"functions"`
	// FunctionBytes is the largest module the tenant may upload.
	FunctionBytes int `json:"function_bytes"`
	// FunctionTimeoutMS bounds the guest's run time in each callback of a request;
	// 0 means the edge's default (DefaultFunctionTimeoutMS).
	FunctionTimeoutMS int `json:"function_timeout_ms"`
	// FunctionConcurrency caps the tenant's guest runs at once on each edge; 0 means the
	// edge's own default.
	FunctionConcurrency int `json:"function_concurrency"`
}

// Defaults of the function limits: what an edge applies when a plan leaves a limit at 0
// (timeout, concurrency) or has no resources at all, and the size the built-in plans
// start from.
const (
	DefaultFunctionBytes     = 4 << 20
	DefaultFunctionTimeoutMS = 5
)

// MaxResources are the ceilings of a platform plan's resource limits: what a shared
// edge can hold for one tenant. An omitted limit takes its ceiling.
var MaxResources = ResourceLimits{
	Routes:          50_000,
	Consumers:       1_000_000,
	KeysPerConsumer: 100,
	ConsumerPlans:   1_000,
	Domains:         1_000,
	JWTIssuers:      MaxIssuersPerTenant,
	// The access-rules engine's own bounds: 1,000 rules and 10,000 role links.
	AccessRules: 11_000,
	CacheBytes:  1 << 40,
	Functions:   1_000,
	// Modules are kept in Postgres and in NATS and compiled by every edge.
	FunctionBytes: 16 << 20,
	// Long enough for real work in a filter, short enough that a loop cannot hold a
	// request for more than a blink.
	FunctionTimeoutMS:   100,
	FunctionConcurrency: 256,
}

// Resource names: the fields of ResourceLimits as they appear in JSON, and the Field of
// the validation error a save over the limit gets.
const (
	ResRoutes          = "routes"
	ResConsumers       = "consumers"
	ResKeysPerConsumer = "keys_per_consumer"
	ResConsumerPlans   = "plans"
	ResDomains         = "domains"
	ResJWTIssuers      = "jwt_issuers"
	ResAccessRules     = "policy_rules"
	ResCacheBytes      = "cache_bytes"
	ResFunctions       = "functions"
	ResFunctionBytes   = "function_bytes"
	ResFunctionTimeout = "function_timeout_ms"
	ResFunctionConc    = "function_concurrency"
)

// resourceNouns says what each count is, for messages ("allows 10 routes"), plural and
// singular.
var resourceNouns = map[string][2]string{
	ResRoutes:          {"routes", "route"},
	ResConsumers:       {"consumers", "consumer"},
	ResKeysPerConsumer: {"keys per consumer", "key per consumer"},
	ResConsumerPlans:   {"consumer plans", "consumer plan"},
	ResDomains:         {"custom domains", "custom domain"},
	ResJWTIssuers:      {"JWT issuers", "JWT issuer"},
	ResAccessRules:     {"policy rules and role links together", "policy rule or role link"},
	ResFunctions:       {"functions", "function"},
}

// OverLimit is the error of a save that would take a tenant past its plan's limit of
// resource (one of the Res* names).
func OverLimit(resource, plan string, limit int64) *Error {
	if resource == ResCacheBytes {
		return Invalid(resource, "the %s plan allows no response cache (cache_bytes 0); remove the route's cache or move to a larger plan", plan)
	}
	if resource == ResFunctionBytes {
		return Invalid(resource, "the %s plan allows modules of at most %d bytes; make the module smaller or move to a larger plan", plan, limit)
	}
	nouns := resourceNouns[resource]
	if limit == 0 {
		return Invalid(resource, "the %s plan allows no %s; move to a larger plan", plan, nouns[0])
	}
	noun := nouns[0]
	if limit == 1 {
		noun = nouns[1]
	}
	what := "delete one"
	if resource == ResAccessRules {
		what = "remove some"
	}
	return Invalid(resource, "the %s plan allows %d %s; %s or move to a larger plan", plan, limit, noun, what)
}

// Get returns the limit of resource (one of the Res* names).
func (r *ResourceLimits) Get(resource string) int64 {
	switch resource {
	case ResRoutes:
		return int64(r.Routes)
	case ResConsumers:
		return int64(r.Consumers)
	case ResKeysPerConsumer:
		return int64(r.KeysPerConsumer)
	case ResConsumerPlans:
		return int64(r.ConsumerPlans)
	case ResDomains:
		return int64(r.Domains)
	case ResJWTIssuers:
		return int64(r.JWTIssuers)
	case ResAccessRules:
		return int64(r.AccessRules)
	case ResCacheBytes:
		return r.CacheBytes
	case ResFunctions:
		return int64(r.Functions)
	case ResFunctionBytes:
		return int64(r.FunctionBytes)
	case ResFunctionTimeout:
		return int64(r.FunctionTimeoutMS)
	case ResFunctionConc:
		return int64(r.FunctionConcurrency)
	}
	panic("tenants: unknown resource " + resource)
}

// Validate checks every limit against its ceiling; field paths start with "resources.".
func (r *ResourceLimits) Validate() error {
	for _, c := range []struct {
		name     string
		v, limit int64
	}{
		{ResRoutes, int64(r.Routes), int64(MaxResources.Routes)},
		{ResConsumers, int64(r.Consumers), int64(MaxResources.Consumers)},
		{ResKeysPerConsumer, int64(r.KeysPerConsumer), int64(MaxResources.KeysPerConsumer)},
		{ResConsumerPlans, int64(r.ConsumerPlans), int64(MaxResources.ConsumerPlans)},
		{ResDomains, int64(r.Domains), int64(MaxResources.Domains)},
		{ResJWTIssuers, int64(r.JWTIssuers), int64(MaxResources.JWTIssuers)},
		{ResAccessRules, int64(r.AccessRules), int64(MaxResources.AccessRules)},
		{ResCacheBytes, r.CacheBytes, MaxResources.CacheBytes},
		{ResFunctions, int64(r.Functions), int64(MaxResources.Functions)},
		{ResFunctionBytes, int64(r.FunctionBytes), int64(MaxResources.FunctionBytes)},
		{ResFunctionTimeout, int64(r.FunctionTimeoutMS), int64(MaxResources.FunctionTimeoutMS)},
		{ResFunctionConc, int64(r.FunctionConcurrency), int64(MaxResources.FunctionConcurrency)},
	} {
		if c.v < 0 || c.v > c.limit {
			return Invalid(fmt.Sprintf("resources.%s", c.name), "must be between 0 and %d, got %d", c.limit, c.v)
		}
	}
	return nil
}

// LogPolicy is a platform plan's request log: which share of the calls that succeed the
// edges log (every refused or failed call is logged) and how long entries are kept.
type LogPolicy struct {
	// SamplePercent, 0–100; nil: DefaultLogSamplePercent.
	SamplePercent *float64 `json:"sample_percent,omitempty"`
	// RetentionDays, 1–MaxLogRetentionDays; 0: DefaultLogRetentionDays.
	RetentionDays int `json:"retention_days,omitempty"`
}

// Request log defaults and bounds.
const (
	DefaultLogSamplePercent = 1.0
	DefaultLogRetentionDays = 7
	MaxLogRetentionDays     = 90
)

// Sample is the policy's sample percent, the default for a nil policy or field.
func (l *LogPolicy) Sample() float64 {
	if l == nil || l.SamplePercent == nil {
		return DefaultLogSamplePercent
	}
	return *l.SamplePercent
}

// Retention is the policy's retention in days, the default for a nil policy or 0.
func (l *LogPolicy) Retention() int {
	if l == nil || l.RetentionDays == 0 {
		return DefaultLogRetentionDays
	}
	return l.RetentionDays
}

// Validate checks the bounds; a nil policy is valid.
func (l *LogPolicy) Validate() error {
	if l == nil {
		return nil
	}
	if s := l.SamplePercent; s != nil && !(*s >= 0 && *s <= 100) {
		return Invalid("logs.sample_percent", "must be between 0 and 100, got %v", *s)
	}
	if l.RetentionDays < 0 || l.RetentionDays > MaxLogRetentionDays {
		return Invalid("logs.retention_days", "must be between 1 and %d (0: %d), got %d", MaxLogRetentionDays, DefaultLogRetentionDays, l.RetentionDays)
	}
	return nil
}

// AsConsumerPlan is p's limits in the shape of a consumer plan, the form the limiter
// compiles.
func (p *PlatformPlan) AsConsumerPlan() *ConsumerPlan {
	return &ConsumerPlan{Name: p.Name, RateLimit: p.RateLimit, Quota: p.Quota, Concurrency: p.Concurrency, Mode: p.Mode}
}

// Validate checks p and fills defaults, by the rules of a tenant's plan.
func (p *PlatformPlan) Validate() error {
	if err := ValidatePlanName(p.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if p.Resources == nil {
		r := MaxResources
		p.Resources = &r
	}
	if err := p.Resources.Validate(); err != nil {
		return err
	}
	if err := p.Logs.Validate(); err != nil {
		return err
	}
	return validateLimits(p.RateLimit, p.Quota, p.Concurrency, &p.Mode)
}

// PlatformPlanService manages the operator's platform plans.
type PlatformPlanService interface {
	// ListPlatformPlans returns every platform plan, by name.
	ListPlatformPlans(ctx context.Context) ([]*PlatformPlan, error)
	// FindPlatformPlan: ENotFound.
	FindPlatformPlan(ctx context.Context, name string) (*PlatformPlan, error)
	// PutPlatformPlan creates or replaces a platform plan (when p.Version is not 0, only
	// if it is current) and re-publishes the config entry of every tenant on it, so the
	// edges apply the new limits. EValidation, ENotFound (no plan at that version),
	// EVersionConflict.
	PutPlatformPlan(ctx context.Context, p *PlatformPlan) error
}
