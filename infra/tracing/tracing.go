// Package tracing sets up the export of OpenTelemetry traces for one Tollgate service
// (tollgate-edge, tollgate-api, tollgate-billing): OTLP over HTTP to
// TOLLGATE_OTEL_ENDPOINT, head-sampled by TOLLGATE_OTEL_SAMPLE. The services make their
// spans through the otel trace API; only the entry point builds a provider, and with no
// endpoint it builds none, so nothing makes spans at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Provider.
type Config struct {
	// Endpoint is the collector's base URL, e.g. http://collector:4318; spans go to
	// {Endpoint}/v1/traces unless it names a path of its own. Required.
	Endpoint string
	// Sample is the share of traces started here that are recorded, 0–1; a trace
	// continued from a caller follows the caller's decision (parent-based).
	Sample float64
	// Service is the service.name of every span: tollgate-edge, tollgate-api or
	// tollgate-billing. Required.
	Service string
	// RootsSampled: the caller decides itself whether a trace it starts is recorded, before
	// it asks for a span (the edge does, so that a request it does not record costs no
	// span at all); the provider then records every root span it is asked for. A span
	// with a parent still follows the parent's decision.
	RootsSampled bool
	// Exporter replaces the OTLP exporter (tests, benchmarks). Default: OTLP/HTTP to
	// Endpoint.
	Exporter sdktrace.SpanExporter
}

// Provider is a service's tracer provider. Shutdown flushes the spans still queued.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New builds the provider of cfg.Service.
func New(cfg Config) (*Provider, error) {
	if cfg.Service == "" {
		return nil, errors.New("tracing: Config.Service is required")
	}
	if cfg.Sample < 0 || cfg.Sample > 1 {
		return nil, fmt.Errorf("tracing: sample %v is not between 0 and 1", cfg.Sample)
	}
	exp := cfg.Exporter
	if exp == nil {
		u, err := ExportURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u), otlptracehttp.WithTimeout(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	}
	root := sdktrace.TraceIDRatioBased(cfg.Sample)
	if cfg.RootsSampled {
		root = sdktrace.AlwaysSample()
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.Service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
		sdktrace.WithResource(res),
	)
	return &Provider{tp: tp}, nil
}

// ExportURL is where spans are sent for endpoint: its path when it has one, else
// /v1/traces (OTLP/HTTP's default).
func ExportURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: endpoint %q is not an http:// or https:// URL", endpoint)
	}
	if strings.TrimSuffix(u.Path, "/") == "" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Tracer returns the tracer of an instrumentation scope (a package path).
func (p *Provider) Tracer(scope string) trace.Tracer { return p.tp.Tracer(scope) }

// Shutdown exports the queued spans and stops the exporter, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Close exports the spans still queued, for a few seconds at most. A nil Provider (traces
// not exported) has nothing to close.
func (p *Provider) Close() {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
}

// ForceFlush exports the queued spans now (tests).
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Traceparent is the W3C traceparent of the span in ctx, "" when there is none: put into
// what a request writes for other services (the config entries an api request changes),
// it lets their spans join the request's trace.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
