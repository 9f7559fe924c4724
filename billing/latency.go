package billing

import (
	"context"
	"encoding/json"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/gofiber/fiber/v2"

	"tollgate/infra/usage"
	"tollgate/tenants"
)

// LatencyService answers latency questions from the merged sketches. The Postgres store
// implements it beside UsageService.
type LatencyService interface {
	Latency(ctx context.Context, q LatencyQuery) (*LatencyReport, error)
}

// LatencyQuery asks for one tenant's request times over [From, To), both whole UTC
// hours, for one route (RouteID) or, with Every, every route.
type LatencyQuery struct {
	TenantID string
	RouteID  string
	Every    bool
	From, To time.Time
}

// Validate checks the range: whole UTC hours, to after from, at most MaxHourlyRange.
func (q *LatencyQuery) Validate() error {
	u := UsageQuery{From: q.From, To: q.To, Granularity: GranularityHour}
	if err := u.Validate(); err != nil {
		return err
	}
	q.From, q.To = u.From, u.To
	return nil
}

// LatencyStats are the percentiles of one sketch, in milliseconds (within 1% of a time
// that was measured), and how many times it holds.
type LatencyStats struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
}

// LatencyItem is one route's times in one hour: Gateway is the edge's own time (every
// request), Upstream the time spent waiting on the upstream (the requests that called
// it).
type LatencyItem struct {
	RouteID  string       `json:"route_id"`
	Hour     time.Time    `json:"hour"`
	Gateway  LatencyStats `json:"gateway"`
	Upstream LatencyStats `json:"upstream"`
}

// LatencyRoute is one route's times over the whole range: its hours' sketches merged.
type LatencyRoute struct {
	RouteID  string       `json:"route_id"`
	Gateway  LatencyStats `json:"gateway"`
	Upstream LatencyStats `json:"upstream"`
}

// LatencyReport answers a LatencyQuery: Items per route and hour that saw traffic,
// ordered by route and hour, and Routes, each route's figure for the range.
type LatencyReport struct {
	From   time.Time      `json:"from"`
	To     time.Time      `json:"to"`
	Items  []LatencyItem  `json:"items"`
	Routes []LatencyRoute `json:"routes"`
}

// SketchStats reads LatencyStats of a sketch of microseconds.
func SketchStats(s *ddsketch.DDSketch) LatencyStats {
	if s == nil || s.IsEmpty() {
		return LatencyStats{}
	}
	p := usage.SketchPercentiles(s)
	return LatencyStats{Count: int64(s.GetCount()), P50: p.P50, P95: p.P95, P99: p.P99}
}

// LatencyParams are the query parameters the latency handler reads.
var LatencyParams = []string{"route", "from", "to"}

// LatencyOf answers GET /v1/tenants/{slug}/usage/latency?route=&from=&to= for a tenant
// the caller has already resolved and authorized, with a LatencyReport. from and to are
// as for usage (default: the current UTC month so far); route is a route id, every
// route when absent. 404 when the usage service keeps no latency.
func (h *HTTP) LatencyOf(c *fiber.Ctx, tenantID string) error {
	svc, ok := h.svc.(LatencyService)
	if !ok {
		return tenants.Errorf(tenants.ENotFound, "latency is not kept on this server")
	}
	now := h.cfg.Now().UTC()
	q := LatencyQuery{TenantID: tenantID}
	var err error
	if q.From, err = parseTime("from", c.Query("from"), PeriodOf(now).Start()); err != nil {
		return err
	}
	if q.To, err = parseTime("to", c.Query("to"), Hour(now).Add(time.Hour)); err != nil {
		return err
	}
	if args := c.Context().QueryArgs(); args.Has("route") {
		r := string(args.Peek("route"))
		if r == "" || len(r) > 256 {
			return tenants.Errorf(tenants.EInvalidRequest, "route must be a route id (1–256 characters); leave it out for every route")
		}
		q.RouteID = r
	} else {
		q.Every = true
	}
	if err := q.Validate(); err != nil {
		return err
	}
	rep, err := svc.Latency(c.UserContext(), q)
	if err != nil {
		return err
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(body)
}
