package edge

import (
	"time"

	wire "tollgate/infra/reqlog"
)

// logRecord puts a finished request the tenant's log kept (edge/reqlog) into the log.
// The gateway's time is clamped at 0: d is read from the wall clock and the upstream's
// from the monotonic one, so a clock step can make their difference negative, which a
// batch may not carry.
func (e *Edge) logRecord(x *exchange, status int, d time.Duration, in, out int64) {
	l := wire.Entry{Time: x.ctx.Time(), RequestID: string(x.reqID), Method: string(x.ctx.Method()), Path: string(x.path),
		Status: status, GatewayUS: max(d-x.upstream, 0).Microseconds(), UpstreamUS: x.upstream.Microseconds(), BytesIn: in, BytesOut: out}
	if r := x.route; r != nil {
		l.RouteID, l.RouteName = r.id, r.name
	}
	if c := x.consumer; c != nil {
		l.ConsumerID = c.ID
	}
	if r := x.reply; r != nil {
		l.Code, l.Reason = r.code, r.message
	}
	if x.why != "" {
		l.Reason = x.why
	}
	e.cfg.Logs.Record(x.snap.logs, &l)
}
