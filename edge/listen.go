package edge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
)

// The door: the public and TLS listeners serve through one Fiber v2 app.
//
// Fiber owns the connections (its fasthttp server reads requests, writes answers, keeps
// connections alive and drains them on shutdown); the edge owns everything a request
// means. The app has one catch-all handler that hands the request's fasthttp.RequestCtx
// (Ctx.Context) to the gateway (Edge.serve, route.go); Fiber's router is not used, since the
// per-tenant route tables are compiled with each snapshot (routing.Table, compile.go). Fiber's
// ErrorHandler answers what its server rejects before a handler runs (an unparsable
// request, headers over ReadBufferSize, a body over MaxInMemoryBody when it is not
// streamed, a read that timed out) with the contract's JSON envelope.
//
// The listeners stay the edge's: Serve is given a listener whose connections already
// carry the edge's connection handling (conn.ClientListener and conn.LingerListener,
// raw socket I/O: package conn), and Fiber serves it with App.Listener.
//
// How the edge's server settings reach Fiber:
//
//	fasthttp.Server field           fiber.Config
//	Name "" / NoDefaultServerHeader ServerHeader "" (no Server header)
//	NoDefaultContentType            DisableDefaultContentType
//	StreamRequestBody               StreamRequestBody
//	MaxRequestBodySize              BodyLimit (Config.MaxInMemoryBody)
//	DisablePreParseMultipartForm    DisablePreParseMultipartForm
//	ReadBufferSize                  ReadBufferSize (also the header size bound)
//	ReadTimeout, WriteTimeout,      ReadTimeout, WriteTimeout, IdleTimeout
//	IdleTimeout
//	NoDefaultDate (false: a Date)   DisableDefaultDate false
//	ErrorHandler                    ErrorHandler (the edge's envelope, doorError)
//
// Three have no fiber.Config field and are set on the fasthttp server Fiber made, which
// App.Server returns for exactly this: CloseOnShutdown (an answer written while the edge
// drains carries Connection: close, so a keep-alive client goes elsewhere for its next
// request instead of holding the drain open), SecureErrorLogMessage (fasthttp's log lines do not
// quote request bytes) and Logger (the edge's, at debug level; Fiber's own logs
// nothing).
//
// Fiber answers a method outside its RequestMethods with a plain-text 400 of its own,
// before any handler or its ErrorHandler runs. The edge proxies any method token a route
// that takes every method is sent (WebDAV's PROPFIND, QUERY…), and its errors are JSON,
// so the server's handler is Fiber's behind one check: a method Fiber routes goes to
// Fiber, any other straight to the same chain (fiberMethod).

// door is the Fiber app the public and TLS listeners serve through.
type door struct {
	app *fiber.App
	h2  h2Server // nil: HTTP/2 is off (h2.go)
	log *slog.Logger

	mu     sync.Mutex
	lns    []net.Listener // every listener Serve was given, closed by Shutdown
	closed bool
}

func (e *Edge) newDoor() *door {
	app := fiber.New(fiber.Config{
		ServerHeader:                 "",
		DisableDefaultContentType:    true,
		StreamRequestBody:            true,
		BodyLimit:                    e.cfg.MaxInMemoryBody,
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               e.cfg.ReadBufferSize,
		ReadTimeout:                  e.cfg.ReadTimeout,
		WriteTimeout:                 e.cfg.WriteTimeout,
		IdleTimeout:                  e.cfg.IdleTimeout,
		ErrorHandler:                 e.doorError,
		DisableStartupMessage:        true,
		// The chain matches paths itself; these spare Fiber's per-request lower-casing
		// and trailing-slash trimming of a path it does not route on.
		CaseSensitive: true,
		StrictRouting: true,
	})
	app.Use(e.doorHandler)
	srv := app.Server()
	srv.CloseOnShutdown = true
	srv.SecureErrorLogMessage = true
	srv.Logger = fasthttpLogger{e.log}
	fiberHandler := srv.Handler
	srv.Handler = func(ctx *fasthttp.RequestCtx) {
		if fiberMethod(ctx.Request.Header.Method()) {
			fiberHandler(ctx)
			return
		}
		e.serve(ctx)
	}
	d := &door{app: app, log: e.log}
	if !e.cfg.DisableHTTP2 {
		d.h2 = e.newH2Server()
	}
	return d
}

// fiberMethod reports whether Fiber routes a method: those of fiber.DefaultMethods.
func fiberMethod(m []byte) bool {
	switch string(m) {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodDelete,
		fiber.MethodConnect, fiber.MethodOptions, fiber.MethodTrace, fiber.MethodPatch:
		return true
	}
	return false
}

// doorHandler is the app's one handler: the gateway chain on the request.
func (e *Edge) doorHandler(c *fiber.Ctx) error {
	ctx := c.Context()
	// Fiber parses the request URI when it takes a request in. A parsed URI is what
	// fasthttp's Request.Write sends (request line and Host) in place of the headers the
	// chain sets for the upstream; marking it unparsed again hands the chain the request
	// exactly as fasthttp read it.
	ctx.Request.SetRequestURIBytes(ctx.Request.Header.RequestURI())
	e.serve(ctx)
	return nil
}

// doorError is Fiber's ErrorHandler: the edge's envelope for what Fiber's server refused
// (it reaches here as a *fiber.Error of serverErrorHandler's mapping). The chain answers
// everything else itself and returns no error.
func (e *Edge) doorError(c *fiber.Ctx, err error) error {
	r := replyInternalError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fiber.StatusRequestTimeout:
			hangUp(c)
			return nil
		case fiber.StatusRequestEntityTooLarge:
			r = replyBodyTooLarge
		case fiber.StatusRequestHeaderFieldsTooLarge:
			r = replyHeaderTooLarge
		default:
			// 400 for a malformed request, and also for what Fiber calls 502 (a read
			// that failed): the client sent no complete request.
			r = replyBadRequest
		}
	} else {
		e.log.Error("edge: the request chain returned an error", "err", err)
	}
	e.refuse(c.Context(), r)
	return nil
}

// hangUp closes the connection of a request whose read timed out, without an answer.
// fasthttp answers a connection that sent nothing within ReadTimeout, or stopped halfway
// through its headers, with an error response; nginx and Go's net/http close it without
// a word, and a client that pooled the connection would otherwise read that answer as
// the reply to the next request it sends. Once the connection is closed, the server's
// write of the error response fails and nothing reaches the client.
func hangUp(c *fiber.Ctx) {
	if conn := c.Context().Conn(); conn != nil {
		_ = conn.Close()
	}
}

// refuse answers a request the chain never saw with one of the edge's errors.
func (e *Edge) refuse(ctx *fasthttp.RequestCtx, r *reply) {
	x := exchangePool.Get().(*exchange)
	x.ctx, x.e = ctx, e
	x.newRequestID()
	x.rm = e.labels.NoTenant
	x.fail(r)
	ctx.Response.Header.SetCanonical(hdrRequestID, x.reqID)
	x.rm.Observe(x.status(), 0)
	x.reset()
	exchangePool.Put(x)
}

// Serve serves ln until Shutdown; nil once Shutdown has closed it.
func (d *door) Serve(ln net.Listener) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	d.lns = append(d.lns, ln)
	d.mu.Unlock()
	if sl := splitOf(ln); sl != nil {
		d.serveH2(sl)
	}
	return d.app.Listener(ln)
}

// ShutdownWithContext stops accepting, closes idle connections and waits for the
// requests in flight (fasthttp's drain, through Fiber). A listener whose Serve began
// while the drain ran is closed too, so no Serve outlives Shutdown.
func (d *door) ShutdownWithContext(ctx context.Context) error {
	h2done := make(chan error, 1)
	if d.h2 != nil {
		// HTTP/2 connections get GOAWAY and their streams in flight finish, beside
		// fasthttp's drain.
		go func() { h2done <- d.h2.Shutdown(ctx) }()
	} else {
		h2done <- nil
	}
	err := d.app.ShutdownWithContext(ctx)
	d.mu.Lock()
	d.closed = true
	lns := d.lns
	d.lns = nil
	d.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close() // most were closed by the drain
	}
	if err2 := <-h2done; err == nil {
		err = err2
	}
	return err
}

// SetRawIO chooses whether the edge's sockets, its clients' and its upstreams', are read
// and written with raw system calls from the next connection on (conn.SetRawIO;
// TOLLGATE_EDGE_RAW_IO). Default: on; always off in race-detector builds.
func SetRawIO(on bool) { conn.SetRawIO(on) }

// RawIO reports whether new connections use raw system calls (SetRawIO).
func RawIO() bool { return conn.RawIO() }

// SetYieldReads chooses whether new connections, clients' and upstreams', yield to the
// other runnable goroutines between writing and reading when GOMAXPROCS is 1
// (conn.SetYieldReads; TOLLGATE_EDGE_YIELD_READS). Default: on.
func SetYieldReads(on bool) { conn.SetYieldReads(on) }

// SetHTTP2BatchWrites chooses whether HTTP/2 connections made from now on, clients' and
// upstreams', gather their writes into one system call per pass of the scheduler
// (conn.BatchWrites; TOLLGATE_EDGE_HTTP2_BATCH_WRITES). Default: on.
func SetHTTP2BatchWrites(on bool) { conn.SetBatchWrites(on) }

// SetShortReadWait chooses whether a WebSocket tunnel whose read left its socket empty
// waits for the poller instead of reading again until EAGAIN, from the next tunnel on (conn.SetShortReadWait; TOLLGATE_EDGE_SHORT_READ_WAIT). Default: off; it
// needs raw I/O (SetRawIO).
func SetShortReadWait(on bool) { conn.SetShortReadWait(on) }

// Serve serves tenant traffic on public and the admin endpoints (/metrics, /healthz,
// /readyz, and /debug/pprof/ when Pprof) on admin, which may be nil. It returns nil once
// Shutdown has drained the edge, or the first error of either listener (after shutting
// the edge down).
func (e *Edge) Serve(public, admin net.Listener) error {
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- e.public.Serve(e.plainListener(public)) }()
	if admin != nil {
		n++
		go func() {
			err := e.admin.Serve(admin)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	var first error
	for i := 0; i < n; i++ {
		err := <-errc
		if err != nil && first == nil && !e.draining.Load() {
			first = err
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = e.Shutdown(ctx)
			cancel()
		}
	}
	if e.draining.Load() {
		<-e.shutDown
	}
	return first
}

// ServeAdmin serves the admin endpoints (/metrics, /healthz, /readyz…) on ln, before the
// edge is ready, so that its readiness can be watched while it loads. It returns nil once
// Shutdown has stopped it. Serve does the same with the public listener beside it.
func (e *Edge) ServeAdmin(ln net.Listener) error {
	err := e.admin.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServePublic serves tenant traffic on ln. Open ln when the config is in, just before
// Loaded, and serve it after: connections made before are refused by the kernel (a load
// balancer or a client tries another edge), those made while the edge compiles wait in
// the listen queue; none is answered 503 not_ready. It returns nil once Shutdown has
// stopped it.
func (e *Edge) ServePublic(ln net.Listener) error {
	err := e.public.Serve(e.plainListener(ln))
	if e.draining.Load() {
		return nil
	}
	return err
}
