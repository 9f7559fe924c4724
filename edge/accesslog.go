package edge

import (
	"time"

	"tollgate/edge/accesslog"
)

// accessRecord hands a finished request to the access log (Config.AccessLog; package
// accesslog writes it off the request path).
func (e *Edge) accessRecord(x *exchange, status int, d time.Duration) {
	a := e.access
	if !a.Enabled() {
		return
	}
	l := accesslog.Line{
		At: x.ctx.Time(), Dur: d, Status: status,
		RequestID: string(x.reqID),
		Method:    string(x.ctx.Method()),
		Path:      string(x.path),
		Remote:    x.ctx.RemoteAddr().String(),
		// The declared length (-1 when chunked), named for what it is: the line is written
		// before a streamed body ends, so the bytes that went through are the meter's.
		ContentLength: x.ctx.Response.Header.ContentLength(),
	}
	if x.snap != nil {
		l.Tenant = x.snap.Slug
	}
	if r := x.route; r != nil {
		l.Route = r.name
	}
	if c := x.consumer; c != nil {
		l.Consumer = c.ID
	}
	if t := x.target; t != nil {
		l.Upstream = t.URL
	}
	if x.reply != nil {
		l.Code = x.reply.code
	}
	a.Record(l)
}
