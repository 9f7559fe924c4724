package config_test

import (
	"strings"
	"testing"

	"tollgate/infra/config"
	"tollgate/infra/tracing"
)

// TestTraceSettings: no endpoint, no provider; the sample defaults to 1 % and must be a
// share; a bad endpoint stops the process naming the variable.
func TestTraceSettings(t *testing.T) {
	c, err := config.FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.OTELEndpoint != "" || c.OTELSample != config.DefaultOTELSample {
		t.Fatalf("defaults: %q %v", c.OTELEndpoint, c.OTELSample)
	}
	if p, err := c.Tracing("tollgate-edge", true); p != nil || err != nil {
		t.Fatalf("no endpoint: provider %v, %v", p, err)
	}
	c, err = config.FromEnv(env(map[string]string{"TOLLGATE_OTEL_ENDPOINT": "http://collector:4318", "TOLLGATE_OTEL_SAMPLE": "1"}))
	if err != nil || c.OTELSample != 1 {
		t.Fatalf("set: %v %v", c, err)
	}
	p, err := c.Tracing("tollgate-api", false)
	if err != nil || p == nil {
		t.Fatalf("provider: %v", err)
	}
	_ = p.Shutdown(t.Context())
	for _, tc := range []struct{ name, value string }{
		{"TOLLGATE_OTEL_ENDPOINT", "collector:4318"},
		{"TOLLGATE_OTEL_ENDPOINT", "grpc://collector:4317"},
		{"TOLLGATE_OTEL_SAMPLE", "2"},
		{"TOLLGATE_OTEL_SAMPLE", "-0.1"},
		{"TOLLGATE_OTEL_SAMPLE", "NaN"},
		{"TOLLGATE_OTEL_SAMPLE", "1%"},
	} {
		_, err := config.FromEnv(env(map[string]string{tc.name: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%q: %v, want an error naming it", tc.name, tc.value, err)
		}
	}
	for in, want := range map[string]string{
		"http://collector:4318":         "http://collector:4318/v1/traces",
		"http://collector:4318/":        "http://collector:4318/v1/traces",
		"https://otel.example.com/otlp": "https://otel.example.com/otlp",
	} {
		if got, err := tracing.ExportURL(in); got != want || err != nil {
			t.Errorf("ExportURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
