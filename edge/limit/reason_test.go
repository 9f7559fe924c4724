package limit_test

import (
	"testing"
	"time"

	"tollgate/edge/limit"
)

func TestRuleReason(t *testing.T) {
	rate, _ := limit.NewRate(limit.Scope{Tenant: "t", Name: "tenant"}, limit.Rate{Limit: 10, Per: time.Second, Burst: 20})
	perIP, _ := limit.NewRate(limit.Scope{Tenant: "t", Name: "route-ip:r1"}, limit.Rate{Limit: 100, Per: time.Minute})
	quota, _ := limit.NewQuota(limit.Scope{Tenant: "t", Name: "consumer"}, 1000)
	conc, _ := limit.NewConcurrency(limit.Scope{Tenant: "t", Name: "tenant"}, 5)
	for r, want := range map[*limit.Rule]string{
		rate:  "the platform plan's rate limit of 10 per second (burst 20) was reached",
		perIP: "the route's per-client-address rate limit of 100 per minute (burst 100) was reached",
		quota: "the consumer's plan's quota of 1000 requests this calendar month (UTC) is used up",
		conc:  "the platform plan's cap of 5 requests in flight at once was reached",
	} {
		if got := r.Reason(); got != want {
			t.Errorf("Reason() = %q, want %q", got, want)
		}
	}
}
