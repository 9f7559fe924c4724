package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Platform plans: the operator's plans a tenant's "plan" names. Every token may read
// them (a tenant chooses among them); only the admin token may change one, which
// re-publishes the config of every tenant on it.

// platformPlanBody is the body of PUT /v1/platform/plans/{name}.
type platformPlanBody struct {
	RateLimit   *planRateBody  `json:"rate_limit" doc:"The rate of the whole tenant, all its consumers and routes together. Default: none."`
	Quota       *quotaBody     `json:"quota" doc:"The tenant's requests per calendar month (UTC). Default: none."`
	Concurrency int            `json:"concurrency" doc:"The tenant's requests in flight at once (each edge enforces its share; over it: 503 overloaded); 0 = no cap."`
	Mode        string         `json:"mode" enum:"local,exact,approximate" doc:"Where the rate and quota are counted across edges. Default: approximate, or exact when burst < rate × 0.1 s + 1."`
	Resources   *resourcesBody `json:"resources" doc:"What a tenant on the plan may keep, checked when an object is saved (400 validation_failed naming the resource). Lowering a limit keeps what tenants have over it and refuses more. Default: every limit at its ceiling."`
	Logs        *logPolicyBody `json:"logs" doc:"The request log of the plan's tenants (GET /v1/tenants/{slug}/logs). Default: 1% of successful calls sampled, 7 days kept."`
	Version     *int64         `json:"version" doc:"The version the change is based on; or send If-Match (* creates the plan or overwrites it)."`
}

// logPolicyBody is a platform plan's request log.
type logPolicyBody struct {
	SamplePercent *float64 `json:"sample_percent" doc:"The share of successful calls (status < 400) the edges log, 0–100; every refused or failed call is logged. Default: 1."`
	RetentionDays int      `json:"retention_days" doc:"How many days entries are kept, 1–90; 0: 7. Day partitions are dropped past the longest retention of any plan."`
}

// resourcesBody is a platform plan's resource limits; an omitted one takes its ceiling.
type resourcesBody struct {
	Routes              *int   `json:"routes" doc:"Routes, 0–50000. Default: 50000."`
	Consumers           *int   `json:"consumers" doc:"Consumers, 0–1000000. Default: 1000000."`
	KeysPerConsumer     *int   `json:"keys_per_consumer" doc:"API keys of each consumer, 0–100. Default: 100."`
	ConsumerPlans       *int   `json:"plans" doc:"The tenant's consumer plans, 0–1000. Default: 1000."`
	Domains             *int   `json:"domains" doc:"Custom domains, 0–1000. Default: 1000."`
	JWTIssuers          *int   `json:"jwt_issuers" doc:"JWT issuers, 0–32. Default: 32."`
	AccessRules         *int   `json:"policy_rules" doc:"Rules and role links of the tenant's policy together (each counts one), 0–11000. Default: 11000."`
	CacheBytes          *int64 `json:"cache_bytes" doc:"Bytes of each edge's response cache the tenant's answers may hold (body, headers, key and a fixed overhead each); the edge's own budget, shared fairly, may give less. 0: routes may not cache. At most 2^40. Default: 2^40."`
	Functions           *int   `json:"functions" doc:"Function names the tenant keeps (each with its versions), 0–1000. Default: 1000."`
	FunctionBytes       *int   `json:"function_bytes" doc:"Largest module a function upload may have, bytes, 0–16777216. Default: 16777216."`
	FunctionTimeoutMS   *int   `json:"function_timeout_ms" doc:"Guest run time of a function per callback of a request, ms, 0–100; 0: the edge's default (5). Default: 100."`
	FunctionConcurrency *int   `json:"function_concurrency" doc:"The tenant's function runs at once on each edge, 0–256; 0: the edge's default. Default: 256."`
}

func (b *resourcesBody) domain() *tenants.ResourceLimits {
	r := tenants.MaxResources
	if b == nil {
		return &r
	}
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&r.Routes, b.Routes)
	set(&r.Consumers, b.Consumers)
	set(&r.KeysPerConsumer, b.KeysPerConsumer)
	set(&r.ConsumerPlans, b.ConsumerPlans)
	set(&r.Domains, b.Domains)
	set(&r.JWTIssuers, b.JWTIssuers)
	set(&r.AccessRules, b.AccessRules)
	set(&r.Functions, b.Functions)
	set(&r.FunctionBytes, b.FunctionBytes)
	set(&r.FunctionTimeoutMS, b.FunctionTimeoutMS)
	set(&r.FunctionConcurrency, b.FunctionConcurrency)
	if b.CacheBytes != nil {
		r.CacheBytes = *b.CacheBytes
	}
	return &r
}

func decodePlatformPlan(ct string, body []byte, limit int, name string) (*tenants.PlatformPlan, *int64, error) {
	var b platformPlanBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	p := &tenants.PlatformPlan{Name: name, RateLimit: b.RateLimit.domain(), Concurrency: b.Concurrency, Mode: b.Mode,
		Resources: b.Resources.domain()}
	if b.Logs != nil {
		p.Logs = &tenants.LogPolicy{SamplePercent: b.Logs.SamplePercent, RetentionDays: b.Logs.RetentionDays}
	}
	if b.Quota != nil {
		p.Quota = &tenants.Quota{Requests: b.Quota.Requests}
	}
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	return p, b.Version, nil
}

// planNameParam reads a platform plan name from the path; a malformed one is not found.
func planNameParam(c *fiber.Ctx) (string, error) {
	name := c.Params("name")
	if tenants.ValidatePlanName(name) != nil {
		return "", tenants.Errorf(tenants.ENotFound, "platform plan not found")
	}
	return name, nil
}

func (s *Server) listPlatformPlans(c *fiber.Ctx, r *request) error {
	items, err := s.cfg.PlatformPlans.ListPlatformPlans(r.ctx)
	if err != nil {
		return err
	}
	return replyList(c, items, "")
}

func (s *Server) getPlatformPlan(c *fiber.Ctx, r *request) error {
	name, err := planNameParam(c)
	if err != nil {
		return err
	}
	p, err := s.cfg.PlatformPlans.FindPlatformPlan(r.ctx, name)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}

func (s *Server) putPlatformPlan(c *fiber.Ctx, r *request) error {
	name, err := planNameParam(c)
	if err != nil {
		// A new plan's name breaks the rules: say which, rather than "not found".
		if verr := tenants.ValidatePlanName(c.Params("name")); verr != nil {
			return tenants.Invalid("name", "%v", verr)
		}
		return err
	}
	p, bodyVersion, err := decodePlatformPlan(contentType(c), c.Body(), s.cfg.BodyLimit, name)
	if err != nil {
		return err
	}
	v, any, err := version(c, bodyVersion)
	if err != nil {
		return err
	}
	if !any {
		p.Version = v
	}
	if err := s.cfg.PlatformPlans.PutPlatformPlan(r.ctx, p); err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}
