package edge

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// accessLog writes one line per request without putting log I/O on the request path:
// the handler copies a few fields into a buffered channel and one goroutine writes them
// through the logger (JSON when the logger's handler is). When the channel is full the
// line is dropped and counted (tollgate_edge_access_log_dropped_total) instead of making
// the request wait. Off unless Config.AccessLog; the level is checked before any field
// is built.
type accessLog struct {
	log     *slog.Logger
	lines   chan accessLine
	dropped prometheus.Counter
	quit    chan struct{}
	done    chan struct{}
}

type accessLine struct {
	at                                 time.Time
	dur                                time.Duration
	status                             int
	tenant, route, consumer, requestID string
	method, path, remote, upstream     string
	code                               string
	contentLength                      int
}

const accessLogBuffer = 8192

func newAccessLog(log *slog.Logger, dropped prometheus.Counter) *accessLog {
	a := &accessLog{log: log, lines: make(chan accessLine, accessLogBuffer), dropped: dropped, quit: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *accessLog) record(x *exchange, status int, d time.Duration) {
	if !a.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	l := accessLine{
		at: x.ctx.Time(), dur: d, status: status,
		requestID: string(x.reqID),
		method:    string(x.ctx.Method()),
		path:      string(x.path),
		remote:    x.ctx.RemoteAddr().String(),
		// The declared length (-1 when chunked), named for what it is: the line is written
		// before a streamed body ends, so the bytes that went through are the meter's.
		contentLength: x.ctx.Response.Header.ContentLength(),
	}
	if x.snap != nil {
		l.tenant = x.snap.Slug
	}
	if r := x.route; r != nil {
		l.route = r.name
	}
	if c := x.consumer; c != nil {
		l.consumer = c.ID
	}
	if t := x.target; t != nil {
		l.upstream = t.URL
	}
	if x.reply != nil {
		l.code = x.reply.code
	}
	select {
	case a.lines <- l:
	default:
		a.dropped.Inc()
	}
}

func (a *accessLog) run() {
	defer close(a.done)
	ctx := context.Background()
	for {
		select {
		case l := <-a.lines:
			a.write(ctx, l)
		case <-a.quit:
			for {
				select {
				case l := <-a.lines:
					a.write(ctx, l)
				default:
					return
				}
			}
		}
	}
}

func (a *accessLog) write(ctx context.Context, l accessLine) {
	a.log.LogAttrs(ctx, slog.LevelInfo, "access",
		slog.Time("start", l.at),
		slog.String("request_id", l.requestID),
		slog.String("remote", l.remote),
		slog.String("method", l.method),
		slog.String("path", l.path),
		slog.Int("status", l.status),
		slog.String("code", l.code),
		slog.Float64("duration_ms", float64(l.dur.Microseconds())/1000),
		slog.Int("content_length", l.contentLength),
		slog.String("tenant", l.tenant),
		slog.String("route", l.route),
		slog.String("consumer", l.consumer),
		slog.String("upstream", l.upstream),
	)
}

// close writes what is queued and stops the writer. Lines recorded later (a request
// outliving a Shutdown deadline) stay unwritten; recording never blocks or panics.
func (a *accessLog) close() {
	close(a.quit)
	<-a.done
}
