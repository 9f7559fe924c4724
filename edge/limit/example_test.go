package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/limit"
	"tollgate/tenants"
)

// The edge's use: rules compiled with the tenant's snapshot, one AcquireAll and one
// AllowAt per request, the headers on every answer.
func Example() {
	lim, _ := limit.New(limit.Config{}) // Redis: nil, local limits only
	defer lim.Close()

	// At compile time, from the tenant's config.
	plan := &tenants.ConsumerPlan{RateLimit: &tenants.RateLimit{RPS: 2, Burst: 2}, Concurrency: 10}
	rate, _, conc, _ := limit.PlanRules(limit.Scope{Tenant: "t1", Name: "consumer", Mode: limit.ModeExact}, plan)
	route, _ := limit.NewRate(limit.Scope{Tenant: "t1", Name: "route:r1", Mode: limit.ModeLocal}, limit.RateOf(&tenants.RateLimit{RPS: 100}))

	// Per request, once the consumer is known.
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		consumer := []byte("consumer-1")
		checks := []limit.Check{{Rule: route}, {Rule: rate, Key: consumer}, {Rule: conc, Key: consumer}}
		tickets, d := lim.AcquireAll(checks)
		if d.Allowed {
			d = lim.AllowAt(context.Background(), checks, now)
		}
		var h fasthttp.ResponseHeader
		d.WriteHeaders(&h)
		if d.Allowed {
			// ... proxy the request ...
			fmt.Printf("allowed, %d of %d left\n", d.Remaining, d.Limit)
		} else {
			fmt.Printf("%d %s, Retry-After: %s\n", tenants.Status(d.Code), d.Code, h.Peek("Retry-After"))
		}
		tickets.Release()
	}
	// Output:
	// allowed, 1 of 2 left
	// allowed, 0 of 2 left
	// 429 rate_limited, Retry-After: 1
}
