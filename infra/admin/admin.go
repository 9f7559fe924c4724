// Package admin is the admin listener of the api and billing processes, the same three
// endpoints as the edge's: /metrics (Prometheus text), /healthz (the process is up) and
// /readyz (its dependencies answer and it is not shutting down). It is meant for a
// private address: it has no authentication, like the edge's.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime's and the process's collectors, as
// the edge's.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server serves the admin endpoints on one listener.
type Server struct {
	srv      *http.Server
	ready    []func(context.Context) error
	draining atomic.Bool
	done     chan error
}

// readyTimeout bounds one /readyz check of the dependencies.
const readyTimeout = 2 * time.Second

// Serve serves g's metrics on ln until Shutdown. /readyz answers 200 while every ready
// check passes, 503 with the error envelope otherwise and from Shutdown on.
func Serve(ln net.Listener, g prometheus.Gatherer, log *slog.Logger, ready ...func(context.Context) error) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{ready: ready, done: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("/readyz", s.readyz)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	msg := ""
	if s.draining.Load() {
		msg = "shutting down"
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		for _, f := range s.ready {
			if err := f(ctx); err != nil {
				msg = err.Error()
				break
			}
		}
	}
	if msg == "" {
		_, _ = w.Write([]byte(`{"status":"ready"}`))
		return
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": codeNotReady, "message": msg, "request_id": ""}})
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}

// codeNotReady is the contract's error code for a process that cannot serve yet
// (tenants.ENotReady, which the api and the edge answer with); infrastructure spells it out
// rather than import the domain, and the test holds the two equal.
const codeNotReady = "not_ready"

// Drain makes /readyz fail from now on, ahead of the process's shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

// Shutdown fails /readyz and stops serving once in-flight scrapes are done or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; err == nil {
		err = serr
	}
	return err
}
