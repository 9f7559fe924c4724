package tenants

import (
	"context"
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

// PlatformPlan is one of the operator's plans. A tenant's Plan names one, and its limits
// cap the whole tenant: every consumer and route of the tenant together. Tenants' own
// plans (Plan) are for their consumers.
type PlatformPlan struct {
	Name        string     `json:"name"`
	RateLimit   *RateLimit `json:"rate_limit,omitempty"`
	Quota       *Quota     `json:"quota,omitempty"`
	Concurrency int        `json:"concurrency"` // 0 = no cap
	Mode        string     `json:"mode,omitempty"`
	Version     int64      `json:"version"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// Plan is p's limits as a Plan, the form the limiter compiles.
func (p *PlatformPlan) Plan() *Plan {
	return &Plan{Name: p.Name, RateLimit: p.RateLimit, Quota: p.Quota, Concurrency: p.Concurrency, Mode: p.Mode}
}

// Validate checks p and fills defaults, by the rules of a tenant's plan.
func (p *PlatformPlan) Validate() error {
	if err := ValidatePlanName(p.Name); err != nil {
		return Invalid("name", "%v", err)
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
