package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced makes a server span of each request (Config.Tracer), continuing the caller's
// W3C trace context. The span is in the request's user context, so the store's work
// for the request joins it, and a config change it writes carries it to the edges
// (tenants.Entry.Trace). Like Metrics.handler it runs before frame, so it sees the
// status the error envelope was rendered with.
func (s *Server) traced(c *fiber.Ctx) error {
	mine := c.Route()
	ctx := propagation.TraceContext{}.Extract(c.UserContext(), fiberCarrier{c})
	ctx, span := s.cfg.Tracer.Start(ctx, c.Method(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", c.Method())))
	defer span.End()
	c.SetUserContext(ctx)
	err := c.Next()
	route := routeUnmatched
	if r := c.Route(); r != nil && r != mine {
		route = r.Path
	}
	status := c.Response().StatusCode()
	span.SetName(c.Method() + " " + route)
	span.SetAttributes(
		attribute.String("http.route", route),
		attribute.Int("http.response.status_code", status),
	)
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	return err
}

// fiberCarrier reads a request's trace context headers for the propagator.
type fiberCarrier struct{ c *fiber.Ctx }

func (f fiberCarrier) Get(key string) string { return f.c.Get(key) }
func (f fiberCarrier) Set(string, string)    {}
func (f fiberCarrier) Keys() []string        { return nil }

var _ propagation.TextMapCarrier = fiberCarrier{}
