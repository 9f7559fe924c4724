package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/infra/reqlog"
)

// The request log page: the calls the edges logged for the tenant (every refused or
// failed one, a sample of the others), newest first, with the api's filters. console.js
// tails it: every two seconds it fetches this page again with since= the newest entry
// shown and puts the rows it has not seen on top, so the page works without it too.

// LogService lists a tenant's request log (billing/postgres).
type LogService interface {
	Logs(ctx context.Context, q reqlog.Query) (*reqlog.Page, error)
}

type logsData struct {
	Enabled       bool
	Filters       map[string]string
	Error, Field  string
	Items         []logRow
	Older         string // the next page's URL; "" on the last page
	Sampled       int64
	Dropped       int64
	RetentionDays int
	Newest        string // RFC 3339 time of the newest entry shown, for the tail
}

type logRow struct {
	Time                  time.Time
	RequestID             string
	Method, Path          string
	Route, RouteLink      string
	Consumer, ConsLink    string
	Status                int
	Class                 string
	GatewayMS, UpstreamMS string
	Code, Reason          string
}

func (c *Console) logsPage(ctx *fiber.Ctx) error {
	d := logsData{Enabled: c.cfg.Logs != nil, Filters: map[string]string{}}
	if !d.Enabled {
		return c.render(ctx, http.StatusOK, "logs", page{Title: "Logs", Nav: "logs", Data: d})
	}
	tv := tenantOf(ctx)
	for _, k := range reqlog.FilterParams {
		d.Filters[k] = ctx.Query(k)
	}
	q := reqlog.Query{TenantID: tv.ID, Limit: 50}
	err := reqlog.ParseFilters(func(k string) string { return d.Filters[k] }, &q)
	if err == nil {
		q.After, err = reqlog.DecodeCursor(ctx.Query("cursor"))
	}
	var fe *reqlog.FilterError
	if errors.As(err, &fe) {
		d.Field, d.Error = fe.Field, fe.Field+" "+fe.Message
		return c.render(ctx, http.StatusUnprocessableEntity, "logs", page{Title: "Logs", Nav: "logs", Data: d})
	}
	p, err := c.cfg.Logs.Logs(c.ctx(ctx), q)
	if err != nil {
		return c.internal(ctx, err)
	}
	d.Sampled, d.Dropped, d.RetentionDays = p.Sampled, p.Dropped, p.RetentionDays
	for _, it := range p.Items {
		r := logRow{Time: it.Time, RequestID: it.RequestID, Method: it.Method, Path: it.Path, Route: it.RouteName,
			Consumer: it.ConsumerID, Status: it.Status, Class: fmt.Sprintf("s%dxx", it.Status/100),
			GatewayMS: fmt.Sprintf("%.1f", float64(it.GatewayUS)/1000), UpstreamMS: fmt.Sprintf("%.1f", float64(it.UpstreamUS)/1000),
			Code: it.Code, Reason: it.Reason}
		if it.RouteID != "" {
			r.RouteLink = c.tenantURL(ctx, "/routes/"+url.PathEscape(it.RouteID))
		}
		if it.ConsumerID != "" {
			r.ConsLink = c.tenantURL(ctx, "/consumers/"+url.PathEscape(it.ConsumerID))
		}
		d.Items = append(d.Items, r)
	}
	if len(p.Items) > 0 {
		d.Newest = p.Items[0].Time.Format(time.RFC3339Nano)
	}
	if p.Next != nil {
		v := url.Values{}
		for k, s := range d.Filters {
			if s != "" {
				v.Set(k, s)
			}
		}
		v.Set("cursor", p.Next.Encode())
		d.Older = c.tenantURL(ctx, "/logs?"+v.Encode())
	}
	return c.render(ctx, http.StatusOK, "logs", page{Title: "Logs", Nav: "logs", Data: d})
}
