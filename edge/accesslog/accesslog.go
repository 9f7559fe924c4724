// Package accesslog writes the edge's access log without putting log I/O on the request
// path: the handler copies a few fields into a buffered channel and one goroutine writes
// them through the logger (JSON when the logger's handler is). When the channel is full
// the line is dropped and counted instead of making the request wait.
package accesslog

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Log is the writer of one edge's access log.
type Log struct {
	log     *slog.Logger
	lines   chan Line
	dropped prometheus.Counter
	quit    chan struct{}
	done    chan struct{}
}

// Line is one request's entry.
type Line struct {
	At                                 time.Time
	Dur                                time.Duration
	Status                             int
	Tenant, Route, Consumer, RequestID string
	Method, Path, Remote, Upstream     string
	Code                               string
	ContentLength                      int
}

const buffer = 8192

// New starts the writer; dropped counts the lines a full buffer turned away.
func New(log *slog.Logger, dropped prometheus.Counter) *Log {
	a := &Log{log: log, lines: make(chan Line, buffer), dropped: dropped, quit: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// Enabled says whether lines are written at all: the level is checked before any field
// is built.
func (a *Log) Enabled() bool { return a.log.Enabled(context.Background(), slog.LevelInfo) }

// Record queues l, or drops and counts it when the writer is behind.
func (a *Log) Record(l Line) {
	select {
	case a.lines <- l:
	default:
		a.dropped.Inc()
	}
}

func (a *Log) run() {
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

func (a *Log) write(ctx context.Context, l Line) {
	a.log.LogAttrs(ctx, slog.LevelInfo, "access",
		slog.Time("start", l.At),
		slog.String("request_id", l.RequestID),
		slog.String("remote", l.Remote),
		slog.String("method", l.Method),
		slog.String("path", l.Path),
		slog.Int("status", l.Status),
		slog.String("code", l.Code),
		slog.Float64("duration_ms", float64(l.Dur.Microseconds())/1000),
		slog.Int("content_length", l.ContentLength),
		slog.String("tenant", l.Tenant),
		slog.String("route", l.Route),
		slog.String("consumer", l.Consumer),
		slog.String("upstream", l.Upstream),
	)
}

// Close writes what is queued and stops the writer. Lines recorded later (a request
// outliving a Shutdown deadline) stay unwritten; recording never blocks or panics.
func (a *Log) Close() {
	close(a.quit)
	<-a.done
}
