package tenants

import (
	"fmt"
	"strconv"
)

// Warning is a note on a write that succeeded but may not do what its author meant: the
// field it is about, and why.
type Warning struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// PlanWarnings lists where consumer plan p allows more than platform, the tenant's own
// platform plan: its rate, burst, quota or concurrency above the platform plan's. Such a
// plan is saved all the same (the platform plan caps the whole tenant at the edge, so
// no consumer ever gets more), but a tenant that sells it promises what it cannot
// deliver. nil when platform is nil or nothing exceeds it.
func PlanWarnings(p *ConsumerPlan, platform *PlatformPlan) []Warning {
	if p == nil || platform == nil {
		return nil
	}
	var out []Warning
	add := func(field, what, mine, theirs string) {
		out = append(out, Warning{Field: field, Message: fmt.Sprintf(
			"%s %s is above the %s of the tenant's platform plan %q, which caps the whole tenant at the edge",
			what, mine, theirs, platform.Name)})
	}
	if r, pr := p.RateLimit, platform.RateLimit; r != nil && pr != nil {
		if perMinute(r) > perMinute(pr) {
			field := "rate_limit.rps"
			if r.RPS == 0 {
				field = "rate_limit.rpm"
			}
			add(field, "The rate", rateText(r), rateText(pr))
		}
		if pr.Burst > 0 && r.Burst > pr.Burst {
			add("rate_limit.burst", "The burst", strconv.Itoa(r.Burst), strconv.Itoa(pr.Burst))
		}
	}
	if q, pq := p.Quota, platform.Quota; q != nil && pq != nil && q.Requests > pq.Requests {
		add("quota.requests", "The quota of", fmt.Sprintf("%d requests a month", q.Requests), fmt.Sprintf("%d", pq.Requests))
	}
	if platform.Concurrency > 0 && p.Concurrency > platform.Concurrency {
		add("concurrency", "A concurrency of", strconv.Itoa(p.Concurrency), strconv.Itoa(platform.Concurrency))
	}
	return out
}

// perMinute is r's rate in requests a minute, so rps and rpm compare.
func perMinute(r *RateLimit) int64 {
	if r.RPS > 0 {
		return int64(r.RPS) * 60
	}
	return int64(r.RPM)
}

func rateText(r *RateLimit) string {
	if r.RPS > 0 {
		return fmt.Sprintf("%d requests/s", r.RPS)
	}
	return fmt.Sprintf("%d requests/min", r.RPM)
}
