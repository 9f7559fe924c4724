package limit

import (
	"fmt"
	"strings"
	"time"
)

// Reason says in words which limit refused a request and its window, for the tenant's
// request log: "the platform plan's rate limit of 10 per 1s (burst 20) was reached". It
// is made when the rule compiles, so a refusal costs nothing more. The scope names are
// the edge's: "tenant", "consumer", "route:<id>", "route-ip:<id>", "route-consumer:<id>".
func (r *Rule) Reason() string { return r.reason }

func (r *Rule) describe() string {
	whose := "this API's"
	switch n := r.name; {
	case n == "tenant":
		whose = "the platform plan's"
	case n == "consumer":
		whose = "the consumer's plan's"
	case strings.HasPrefix(n, "route-ip:"):
		whose = "the route's per-client-address"
	case strings.HasPrefix(n, "route-consumer:"):
		whose = "the route's per-consumer"
	case strings.HasPrefix(n, "route:"):
		whose = "the route's"
	}
	switch r.kind {
	case kindRate:
		per := r.rate.Per.String()
		switch r.rate.Per {
		case time.Second:
			per = "second"
		case time.Minute:
			per = "minute"
		}
		return fmt.Sprintf("%s rate limit of %d per %s (burst %d) was reached", whose, r.rate.Limit, per, r.rate.Burst)
	case kindQuota:
		return fmt.Sprintf("%s quota of %d requests this calendar month (UTC) is used up", whose, r.limit)
	default:
		return fmt.Sprintf("%s cap of %d requests in flight at once was reached", whose, r.limit)
	}
}
