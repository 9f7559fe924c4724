package edge

import (
	"tollgate/edge/meter"
)

// Metering (issue 6). Every request of a known tenant is counted once, in finish, by
// Config.Meter: by tenant, route (none for a request that matched no route), consumer,
// UTC hour of arrival and status class, with the request and response body sizes. A
// request whose Host names no tenant, and one answered before the config was loaded or
// while draining, is not metered. Whether a request is billable is billing's rule
// (billing.Billable), applied to what the edge reports here: the status, and whether the
// upstream produced the response (x.reply == nil) or the edge answered itself (401, 403,
// 404 route_not_found, 429, 502/504 of a failed upstream, ...).
//
// The handles are made when a snapshot is compiled (Snapshot.meter, route.meter,
// Consumer.meter), so recording costs no lookup by string and allocates nothing.
//
// JWT callers: the exchange's x.jwt Consumer has no handle of its own, so the record
// falls back to the meter's interned handle of "<iss>|<claim>" (a lock-free lookup, but
// an entry per caller for the life of the process). The hook for the JWT wiring is
// meterHandleFor: give the cached verified identity a meter.NewConsumer(tenant, id.ID)
// and set Consumer.meter in setJWTCaller, and the fallback is never taken.

// meterRoute is the handle of a tenant's route ("" for requests that matched no route);
// nil when metering is off.
func (e *Edge) meterRoute(tenantID, routeID string) *meter.Route {
	if e.cfg.Meter == nil {
		return nil
	}
	return e.cfg.Meter.Route(tenantID, routeID)
}

// meterConsumer is a new handle of a compiled consumer; nil when metering is off.
func (e *Edge) meterConsumer(tenantID, consumerID string) *meter.Consumer {
	if e.cfg.Meter == nil {
		return nil
	}
	return meter.NewConsumer(tenantID, consumerID)
}

// meterHandleFor is the meter handle of a request's consumer (nil for none).
func (e *Edge) meterHandleFor(s *Snapshot, c *Consumer) *meter.Consumer {
	if c == nil {
		return nil
	}
	if c.meter != nil {
		return c.meter
	}
	if c.ID == "" {
		return nil
	}
	return e.cfg.Meter.Consumer(s.TenantID, c.ID) // a JWT caller: see above
}

// meterRecord counts a finished request of a known tenant.
func (e *Edge) meterRecord(x *exchange, status int) {
	s := x.snap
	mr := s.meter
	if x.route != nil {
		mr = x.route.meter
	}
	if mr == nil {
		return
	}
	req, resp := &x.ctx.Request, &x.ctx.Response
	in := req.Header.ContentLength() // a chunked body read by bodyLimitStep has one by now
	if in < 0 {
		in = 0
		if !req.IsBodyStream() {
			in = len(req.Body())
		}
	}
	var out int
	if resp.IsBodyStream() {
		// Streamed to the client after this: its declared length, 0 when chunked.
		out = max(resp.Header.ContentLength(), 0)
	} else {
		out = len(resp.Body())
	}
	mr.Record(e.meterHandleFor(s, x.consumer), status, x.reply == nil, int64(in), int64(out), x.ctx.Time())
}
