package portal

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Custom domains. A tenant may name one of its verified domains for its portal; the api
// then serves that portal at "/" for requests whose Host is that name. The table of such
// names is read from the store in the background every refresh interval, so a request
// costs one map look-up and never waits on the database, and a Host a client makes up
// can neither grow the table nor cause a query.

// customHostKey marks, in the fasthttp request's user values, a request that arrived on
// a portal's custom domain: its links and cookies then live at "/".
const customHostKey = "tollgate.portal.host"

type hostTable struct {
	load    func(context.Context) (map[string]string, error)
	every   time.Duration
	log     *slog.Logger
	current atomic.Pointer[map[string]string]
	loaded  atomic.Int64 // unix nanoseconds of the last load attempt
	mu      sync.Mutex   // one load at a time
}

func newHostTable(load func(context.Context) (map[string]string, error), every time.Duration, log *slog.Logger) *hostTable {
	h := &hostTable{load: load, every: every, log: log}
	empty := map[string]string{}
	h.current.Store(&empty)
	return h
}

// wrap puts the host check in front of srv's handler, before Fiber's routing, so the
// portal's routes see the rewritten path.
func (h *hostTable) wrap(srv *fasthttp.Server) {
	next := srv.Handler
	go h.refresh()
	srv.Handler = func(rc *fasthttp.RequestCtx) {
		if slug := h.lookup(string(rc.Host())); slug != "" {
			rc.SetUserValue(customHostKey, slug)
			rc.URI().SetPath(Prefix + "/" + slug + string(rc.URI().PathOriginal()))
		}
		next(rc)
	}
}

// lookup returns the slug of the tenant whose portal host is host ("" for none), and
// starts a reload of the table when it is due.
func (h *hostTable) lookup(host string) string {
	if time.Since(time.Unix(0, h.loaded.Load())) > h.every && h.mu.TryLock() {
		h.loaded.Store(time.Now().UnixNano())
		go func() {
			defer h.mu.Unlock()
			h.reload()
		}()
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	return (*h.current.Load())[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// refresh loads the table now, waiting for a load in progress.
func (h *hostTable) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loaded.Store(time.Now().UnixNano())
	h.reload()
}

func (h *hostTable) reload() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := h.load(ctx)
	if err != nil {
		// The last table stays: a database hiccup must not take portals off their domains.
		h.log.Warn("portal: custom domains not reloaded", "err", err)
		return
	}
	h.current.Store(&m)
}

// Refresh rereads the custom domains of portals at once; otherwise they are reread every
// HostRefresh, so a settings change takes up to that long to reach this process.
func (p *Portal) Refresh() { p.hosts.refresh() }

func onCustomHost(ctx *fiber.Ctx) bool {
	s, _ := ctx.Context().UserValue(customHostKey).(string)
	return s != ""
}
