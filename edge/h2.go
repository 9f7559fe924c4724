package edge

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/h2door"
	"tollgate/tenants"
)

// HTTP/2 at the door (package h2door): each new connection of the public and TLS
// listeners is sorted between fasthttp (HTTP/1.1) and Go's HTTP/2 server, whose streams
// run through the same chain as HTTP/1.1 requests (h2Chain). TOLLGATE_EDGE_HTTP2=off
// (Config.DisableHTTP2) takes it back out: ALPN offers http/1.1 only and nothing is
// peeked.

// h2Chain is the gateway as the HTTP/2 door sees it.
type h2Chain struct{ e *Edge }

func (c h2Chain) Serve(ctx *fasthttp.RequestCtx) { c.e.serve(ctx) }

func (c h2Chain) Refuse(ctx *fasthttp.RequestCtx, r h2door.Refusal) {
	switch r {
	case h2door.RefuseConnect:
		c.e.refuse(ctx, replyH2Connect)
	case h2door.RefuseHeaderTooLarge:
		c.e.refuse(ctx, replyHeaderTooLarge)
	default:
		c.e.refuse(ctx, replyBadRequest)
	}
}

var replyH2Connect = newReply(tenants.EInvalidRequest, "CONNECT is not served over HTTP/2; WebSocket needs HTTP/1.1")

// h2Config is the HTTP/2 server's: the HTTP/1.1 door's header bound and timeouts, and
// the edge's stream limit.
func (e *Edge) h2Config() h2door.Config {
	return h2door.Config{
		MaxStreams:   e.cfg.HTTP2MaxStreams,
		HeaderBytes:  e.cfg.ReadBufferSize,
		ReadTimeout:  e.cfg.ReadTimeout,
		WriteTimeout: e.cfg.WriteTimeout,
		IdleTimeout:  e.cfg.IdleTimeout,
		Logger:       e.log,
		FastLogger:   fasthttpLogger{e.log},
		NoWorkers:    e.cfg.HTTP2NoWorkers,
		HeaderTable:  e.cfg.HTTP2HeaderTable,
	}
}

// sortWait is how long a new connection may take to show which door it wants: a
// handshake, or its first bytes.
func (e *Edge) sortWait() time.Duration {
	if e.cfg.ReadTimeout > 0 {
		return e.cfg.ReadTimeout
	}
	return e.cfg.IdleTimeout
}

// plainListener is what the door serves for a plain listener: its connections wrapped
// by conn.ClientListener, and with HTTP/2 on, h2c connections sorted out first.
func (e *Edge) plainListener(ln net.Listener) net.Listener {
	if e.public.h2 == nil {
		return conn.ClientListener(ln)
	}
	sl := h2door.NewSplit(ln, h2door.SortPlain(e.sortWait()))
	return splitListener{conn.ClientListener(sl), sl}
}

// splitListener is a listener whose connections an h2door.Split sorted, under the
// wrappers of the HTTP/1.1 door.
type splitListener struct {
	net.Listener
	split *h2door.Split
}

func splitOf(ln net.Listener) *h2door.Split {
	switch l := ln.(type) {
	case splitListener:
		return l.split
	case *h2door.Split:
		return l
	}
	return nil
}

// h2Server is an HTTP/2 server of the door: its own (h2door.Server), or Go's
// (Config.HTTP2GoServer).
type h2Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

func (e *Edge) newH2Server() h2Server {
	if e.cfg.HTTP2GoServer {
		return h2door.NewGoServer(e.h2Config(), h2Chain{e})
	}
	return h2door.NewOwnServer(e.h2Config(), h2Chain{e})
}

// serveH2 serves the HTTP/2 side of l until the door shuts down.
func (d *door) serveH2(l *h2door.Split) {
	go func() {
		err := d.h2.Serve(l.H2())
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			d.log.Error("edge: http2 listener stopped", "err", err)
		}
	}()
}
