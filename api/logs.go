package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/infra/reqlog"
	"tollgate/tenants"
)

// The request log: what the edges logged of a tenant's calls (every refused or failed
// one, a sample of the others), stored by billing (billing/postgres/reqlog.go).

// LogService lists a tenant's request log; billing/postgres implements it.
type LogService interface {
	Logs(ctx context.Context, q reqlog.Query) (*reqlog.Page, error)
}

// logParams are the query parameters of GET .../logs besides limit and cursor.
var logParams = reqlog.FilterParams

type logItem struct {
	Time       time.Time `json:"time" doc:"When the call arrived at the edge (UTC)."`
	RequestID  string    `json:"request_id" doc:"The X-Request-Id the edge answered with."`
	Method     string    `json:"method"`
	Path       string    `json:"path" doc:"The request path, without its query string (queries carry secrets)."`
	Route      string    `json:"route" doc:"The route's name; empty when no route matched."`
	RouteID    string    `json:"route_id" doc:"The route's id; empty when no route matched."`
	Consumer   string    `json:"consumer" doc:"The consumer's id; empty when the call named none."`
	Status     int       `json:"status"`
	Code       string    `json:"code" doc:"The edge's error code when the edge answered itself; empty when the upstream answered."`
	GatewayMS  float64   `json:"gateway_ms" doc:"Time spent in the gateway: the whole call minus upstream_ms."`
	UpstreamMS float64   `json:"upstream_ms" doc:"Time spent waiting for the upstream."`
	BytesIn    int64     `json:"bytes_in" doc:"Request body bytes."`
	BytesOut   int64     `json:"bytes_out" doc:"Response body bytes."`
	Reason     string    `json:"reason" doc:"The edge's answer in words (which target refused the connection, which limit was reached…); empty when the upstream answered."`
}

type notLogged struct {
	Sampled int64 `json:"sampled" doc:"Successful calls the sample rate left out of the log."`
	Dropped int64 `json:"dropped" doc:"Calls an edge could not log (its buffer full, or NATS away longer than it holds entries)."`
}

type logPage struct {
	Items         []logItem `json:"items"`
	Next          string    `json:"next" doc:"Pass as ?cursor= for the next (older) page; empty on the last page."`
	NotLogged     notLogged `json:"not_logged" doc:"Over the window asked (whole hours, within the retention), for the whole tenant whatever the other filters: the calls not in the log, and why."`
	RetentionDays int       `json:"retention_days" doc:"How many days back the log goes (the platform plan's)."`
}

func (s *Server) tenantLogs(c *fiber.Ctx, r *request) error {
	if s.cfg.Logs == nil {
		return tenants.Errorf(tenants.ENotFound, "the request log is not enabled on this server")
	}
	q := reqlog.Query{TenantID: r.tenant.ID}
	err := reqlog.ParseFilters(func(k string) string { return c.Query(k) }, &q)
	if err == nil {
		q.After, err = reqlog.DecodeCursor(c.Query("cursor"))
	}
	var fe *reqlog.FilterError
	if errors.As(err, &fe) {
		e := tenants.Errorf(tenants.EInvalidRequest, "%s %s", fe.Field, fe.Message)
		e.Field = fe.Field
		return e
	}
	q.Limit = 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			e := tenants.Errorf(tenants.EInvalidRequest, "limit must be an integer between 1 and 1000, got %q", v)
			e.Field = "limit"
			return e
		}
		q.Limit = n
	}
	p, err := s.cfg.Logs.Logs(r.ctx, q)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, logPageOf(p), 0)
}

func logPageOf(p *reqlog.Page) logPage {
	out := logPage{Items: make([]logItem, len(p.Items)), Next: p.Next.Encode(),
		NotLogged: notLogged{Sampled: p.Sampled, Dropped: p.Dropped}, RetentionDays: p.RetentionDays}
	for i, it := range p.Items {
		out.Items[i] = logItem{Time: it.Time, RequestID: it.RequestID, Method: it.Method, Path: it.Path, Route: it.RouteName,
			RouteID: it.RouteID, Consumer: it.ConsumerID, Status: it.Status, Code: it.Code,
			GatewayMS: float64(it.GatewayUS) / 1000, UpstreamMS: float64(it.UpstreamUS) / 1000,
			BytesIn: it.BytesIn, BytesOut: it.BytesOut, Reason: it.Reason}
	}
	return out
}
