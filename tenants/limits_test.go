package tenants_test

import (
	"strings"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

func wantInvalid(t *testing.T, err error, field, msg string) {
	t.Helper()
	if tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("want validation error on %s, got %v", field, err)
	}
	e := err.(*tenants.Error)
	if e.Field != field || !strings.Contains(e.Message, msg) {
		t.Fatalf("want field %q with %q, got field %q: %s", field, msg, e.Field, e.Message)
	}
}

// A route's rate_limit: rps or rpm, per route/ip/consumer, the modes and their defaults.
func TestRouteRateLimit(t *testing.T) {
	rl := func(r *tenants.RateLimit) *tenants.Route {
		rt := validRoute()
		rt.RateLimit = r
		return rt
	}
	defaults := []struct {
		name             string
		in               tenants.RateLimit
		auth             string
		burst            int
		per, mode        string
		wantRPS, wantRPM int
	}{
		{"rps", tenants.RateLimit{RPS: 100}, "", 100, "route", "approximate", 100, 0},
		{"rpm", tenants.RateLimit{RPM: 6000}, "", 6000, "route", "approximate", 0, 6000},
		{"small burst is exact", tenants.RateLimit{RPS: 100, Burst: 10}, "", 10, "route", "exact", 100, 0},
		{"burst at the bound is approximate", tenants.RateLimit{RPS: 100, Burst: 11}, "", 11, "route", "approximate", 100, 0},
		{"rpm small burst is exact", tenants.RateLimit{RPM: 6000, Burst: 10}, "", 10, "route", "exact", 0, 6000},
		{"per ip is local", tenants.RateLimit{RPS: 5, Burst: 1, Per: "ip"}, "", 1, "ip", "local", 5, 0},
		{"per consumer", tenants.RateLimit{RPS: 5, Per: "consumer", Mode: "exact"}, tenants.AuthKey, 5, "consumer", "exact", 5, 0},
		{"explicit local", tenants.RateLimit{RPS: 100, Burst: 1, Mode: "local"}, "", 1, "route", "local", 100, 0},
	}
	for _, tc := range defaults {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			r := rl(&in)
			r.Auth = tc.auth
			if err := r.Validate(strict); err != nil {
				t.Fatal(err)
			}
			got := r.RateLimit
			if got.Burst != tc.burst || got.Per != tc.per || got.Mode != tc.mode || got.RPS != tc.wantRPS || got.RPM != tc.wantRPM {
				t.Fatalf("got %+v, want burst %d per %s mode %s", *got, tc.burst, tc.per, tc.mode)
			}
		})
	}

	rejects := []struct {
		name  string
		in    tenants.RateLimit
		auth  string
		field string
		msg   string
	}{
		{"neither", tenants.RateLimit{Burst: 5}, "", "rate_limit.rps", "or set rpm"},
		{"both", tenants.RateLimit{RPS: 5, RPM: 300}, "", "rate_limit.rpm", "not both"},
		{"rpm range", tenants.RateLimit{RPM: 1_000_001}, "", "rate_limit.rpm", "between 1 and 1000000"},
		{"negative rpm", tenants.RateLimit{RPM: -1}, "", "rate_limit.rpm", "between 1"},
		{"burst range", tenants.RateLimit{RPS: 5, Burst: 1_000_001}, "", "rate_limit.burst", "between 1"},
		{"unknown per", tenants.RateLimit{RPS: 5, Per: "user"}, "", "rate_limit.per", "route, ip, consumer"},
		{"consumer without auth", tenants.RateLimit{RPS: 5, Per: "consumer"}, tenants.AuthNone, "rate_limit.per", "auth none"},
		{"unknown mode", tenants.RateLimit{RPS: 5, Mode: "cluster"}, "", "rate_limit.mode", "local, exact, approximate"},
		{"approximate with small burst", tenants.RateLimit{RPS: 100, Burst: 10, Mode: "approximate"}, "", "rate_limit.burst", "at least 11 for mode approximate"},
		{"approximate rpm small burst", tenants.RateLimit{RPM: 60_000, Burst: 100, Mode: "approximate"}, "", "rate_limit.burst", "at least 101"},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			r := rl(&in)
			r.Auth = tc.auth
			wantInvalid(t, r.Validate(strict), tc.field, tc.msg)
		})
	}
}

func TestMinApproximateBurst(t *testing.T) {
	for _, tc := range []struct {
		rl   tenants.RateLimit
		want int
	}{
		{tenants.RateLimit{RPS: 1}, 2}, {tenants.RateLimit{RPS: 100}, 11}, {tenants.RateLimit{RPS: 105}, 12},
		{tenants.RateLimit{RPM: 60}, 2}, {tenants.RateLimit{RPM: 6000}, 11}, {tenants.RateLimit{RPM: 6001}, 12},
	} {
		if got := tenants.MinApproximateBurst(&tc.rl); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.rl, got, tc.want)
		}
	}
}

func TestPlanLimits(t *testing.T) {
	p := tenants.ConsumerPlan{Name: "gold", RateLimit: &tenants.RateLimit{RPM: 600}, Quota: &tenants.Quota{Requests: 10}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Mode != tenants.ModeApproximate || p.RateLimit.Burst != 600 {
		t.Fatalf("defaults: %+v %+v", p, *p.RateLimit)
	}
	small := tenants.ConsumerPlan{Name: "gold", RateLimit: &tenants.RateLimit{RPS: 100, Burst: 5}}
	if err := small.Validate(); err != nil || small.Mode != tenants.ModeExact {
		t.Fatalf("small burst: %v, mode %q", err, small.Mode)
	}
	for _, tc := range []struct {
		p     tenants.ConsumerPlan
		field string
		msg   string
	}{
		{tenants.ConsumerPlan{Name: "g", RateLimit: &tenants.RateLimit{RPS: 5, Per: "ip"}}, "rate_limit.per", "route setting"},
		{tenants.ConsumerPlan{Name: "g", RateLimit: &tenants.RateLimit{RPS: 5, Mode: "exact"}}, "rate_limit.mode", "route setting"},
		{tenants.ConsumerPlan{Name: "g", Mode: "fast"}, "mode", "local, exact, approximate"},
		{tenants.ConsumerPlan{Name: "g", Mode: "approximate", RateLimit: &tenants.RateLimit{RPS: 1000, Burst: 100}}, "rate_limit.burst", "at least 101"},
		{tenants.ConsumerPlan{Name: "g", Quota: &tenants.Quota{Requests: tenants.MaxQuota + 1}}, "quota.requests", "between 1"},
	} {
		wantInvalid(t, tc.p.Validate(), tc.field, tc.msg)
	}
}

func TestPlatformPlanAndTenantLimits(t *testing.T) {
	pp := &tenants.PlatformPlan{Name: "free", RateLimit: &tenants.RateLimit{RPS: 10, Burst: 20}, Quota: &tenants.Quota{Requests: 10_000}, Concurrency: 10}
	if err := pp.Validate(); err != nil {
		t.Fatal(err)
	}
	if pp.Mode != tenants.ModeApproximate {
		t.Fatalf("mode %q", pp.Mode)
	}
	if p := pp.AsConsumerPlan(); p.Name != "free" || p.RateLimit != pp.RateLimit || p.Concurrency != 10 || p.Mode != pp.Mode {
		t.Fatalf("Plan(): %+v", p)
	}
	wantInvalid(t, (&tenants.PlatformPlan{Name: "Free"}).Validate(), "name", "lowercase")

	tn := tenants.Tenant{Slug: "acme", PlatformPlan: "odd", Limits: &tenants.PlatformPlan{Name: "odd", Concurrency: -1}}
	wantInvalid(t, tn.Validate(), "limits.concurrency", "between 0")
}

// The resource limits: ceilings, defaults of a plan without them, and the message of a
// save over one.
func TestResourceLimits(t *testing.T) {
	p := tenants.PlatformPlan{Name: "gold"}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Resources == nil || *p.Resources != tenants.MaxResources {
		t.Fatalf("a plan without resources gets the ceilings, got %+v", p.Resources)
	}
	// The policy ceiling is the engine's own bound on rules and role links together.
	if tenants.MaxResources.AccessRules != accessrules.MaxRules+accessrules.MaxRoleLinks {
		t.Errorf("policy_rules ceiling %d, engine bound %d", tenants.MaxResources.AccessRules, accessrules.MaxRules+accessrules.MaxRoleLinks)
	}
	if tenants.MaxResources.JWTIssuers != tenants.MaxIssuersPerTenant {
		t.Errorf("jwt_issuers ceiling %d", tenants.MaxResources.JWTIssuers)
	}
	for _, c := range []struct {
		edit  func(*tenants.ResourceLimits)
		field string
	}{
		{func(r *tenants.ResourceLimits) { r.Routes = -1 }, "resources.routes"},
		{func(r *tenants.ResourceLimits) { r.Consumers = tenants.MaxResources.Consumers + 1 }, "resources.consumers"},
		{func(r *tenants.ResourceLimits) { r.KeysPerConsumer = -1 }, "resources.keys_per_consumer"},
		{func(r *tenants.ResourceLimits) { r.ConsumerPlans = 1001 }, "resources.plans"},
		{func(r *tenants.ResourceLimits) { r.Domains = 1001 }, "resources.domains"},
		{func(r *tenants.ResourceLimits) { r.JWTIssuers = 33 }, "resources.jwt_issuers"},
		{func(r *tenants.ResourceLimits) { r.AccessRules = -2 }, "resources.policy_rules"},
		{func(r *tenants.ResourceLimits) { r.CacheBytes = 1<<40 + 1 }, "resources.cache_bytes"},
		{func(r *tenants.ResourceLimits) { r.Functions = -1 }, "resources.functions"},
		{func(r *tenants.ResourceLimits) { r.FunctionBytes = 16<<20 + 1 }, "resources.function_bytes"},
		{func(r *tenants.ResourceLimits) { r.FunctionTimeoutMS = 101 }, "resources.function_timeout_ms"},
		{func(r *tenants.ResourceLimits) { r.FunctionConcurrency = -1 }, "resources.function_concurrency"},
	} {
		r := tenants.MaxResources
		c.edit(&r)
		p := tenants.PlatformPlan{Name: "gold", Resources: &r}
		wantInvalid(t, p.Validate(), c.field, "must be between 0 and")
	}

	for _, c := range []struct {
		res   string
		limit int64
		msg   string
	}{
		{tenants.ResRoutes, 10, "the free plan allows 10 routes; delete one or move to a larger plan"},
		{tenants.ResRoutes, 1, "the free plan allows 1 route; delete one or move to a larger plan"},
		{tenants.ResDomains, 0, "the free plan allows no custom domains; move to a larger plan"},
		{tenants.ResKeysPerConsumer, 2, "the free plan allows 2 keys per consumer; delete one"},
		{tenants.ResAccessRules, 100, "the free plan allows 100 policy rules and role links together; remove some or move to a larger plan"},
		{tenants.ResCacheBytes, 0, "the free plan allows no response cache (cache_bytes 0)"},
		{tenants.ResFunctions, 3, "the free plan allows 3 functions; delete one or move to a larger plan"},
		{tenants.ResFunctionBytes, 1 << 20, "the free plan allows modules of at most 1048576 bytes"},
	} {
		wantInvalid(t, tenants.OverLimit(c.res, "free", c.limit), c.res, c.msg)
	}
}
