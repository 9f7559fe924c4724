package tenants_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"tollgate/tenants"
)

// TestUpstreamSettingsDefaults: omitted numbers of the resilience settings and the canary
// take their documented defaults.
func TestUpstreamSettingsDefaults(t *testing.T) {
	r := validRoute()
	r.Upstream.Balance = tenants.BalanceHash
	r.Upstream.HealthCheck = &tenants.HealthCheck{}
	r.Upstream.Passive = &tenants.PassiveHealth{}
	r.Upstream.CircuitBreaker = &tenants.CircuitBreaker{}
	r.Upstream.Retries = &tenants.Retries{}
	r.Canary = &tenants.Canary{Weight: 5, Sticky: true, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://next.example.com"}}}}
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	u := r.Upstream
	want := []struct {
		name      string
		got, want any
	}{
		{"hash_on", u.HashOn, tenants.HashOnConsumer},
		{"health_check", *u.HealthCheck, tenants.HealthCheck{Path: "/", IntervalMS: 5000, TimeoutMS: 1000, HealthyThreshold: 2, UnhealthyThreshold: 3}},
		{"passive_health", *u.Passive, tenants.PassiveHealth{Failures: 5, EjectMS: 30000}},
		{"circuit_breaker", *u.CircuitBreaker, tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 20, WindowMS: 10000, OpenMS: 30000}},
		{"retries", *u.Retries, tenants.Retries{Attempts: 1, BudgetPercent: 20, MinPerSecond: 3}},
		{"canary.sticky_on", r.Canary.StickyOn, tenants.HashOnConsumer},
		{"canary.upstream.balance", r.Canary.Upstream.Balance, tenants.BalanceRoundRobin},
		{"canary.upstream.targets", r.Canary.Upstream.Targets[0], tenants.Target{URL: "https://next.example.com", Weight: 1}},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("%s = %+v, want %+v", w.name, w.got, w.want)
		}
	}
}

// TestUpstreamSettingsRefused: each bad setting is refused on its field.
func TestUpstreamSettingsRefused(t *testing.T) {
	for _, c := range []struct {
		json  string // merged into a valid route
		field string
	}{
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"balance":"random"}}`, "upstream.balance"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"hash_on":"ip"}}`, "upstream.hash_on"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"balance":"hash","hash_on":"cookie"}}`, "upstream.hash_on"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"balance":"hash","hash_on":"header:X User"}}`, "upstream.hash_on"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"balance":"hash","hash_on":"header:X_User"}}`, "upstream.hash_on"},
		{`{"canary":{"weight":5,"match":{"header":"X_Beta","values":["1"]},"upstream":{"targets":[{"url":"https://a.example.com"}]}}}`, "canary.match.header"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"health_check":{"interval_ms":10}}}`, "upstream.health_check.interval_ms"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"health_check":{"path":"health"}}}`, "upstream.health_check.path"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"passive_health":{"failures":-1}}}`, "upstream.passive_health.failures"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"circuit_breaker":{"error_percent":101}}}`, "upstream.circuit_breaker.error_percent"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"retries":{"attempts":6}}}`, "upstream.retries.attempts"},
		{`{"canary":{"weight":5,"upstream":{"targets":[]}}}`, "canary.upstream.targets"},
		{`{"canary":{"weight":5,"upstream":{"targets":[{"url":"ftp://a.example.com"}]}}}`, "canary.upstream.targets[0].url"},
		{`{"canary":{"weight":101,"upstream":{"targets":[{"url":"https://a.example.com"}]}}}`, "canary.weight"},
		{`{"canary":{"weight":5,"match":{},"upstream":{"targets":[{"url":"https://a.example.com"}]}}}`, "canary.match"},
		{`{"canary":{"weight":5,"match":{"claim":"tier"},"upstream":{"targets":[{"url":"https://a.example.com"}]}}}`, "canary.match.claim"},
		{`{"canary":{"weight":5,"sticky_on":"ip","upstream":{"targets":[{"url":"https://a.example.com"}]}}}`, "canary.sticky_on"},
	} {
		r := validRoute()
		if err := json.Unmarshal([]byte(c.json), r); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		err := r.Validate(strict)
		var te *tenants.Error
		if !errors.As(err, &te) || te.Code != tenants.EValidation || te.Field != c.field {
			t.Errorf("%s: %v, want a validation error on %s", c.json, err, c.field)
		}
	}
}

// TestUpstreamProtocol: h2 is kept, http1 is the default and is stored as omitted, any
// other value is refused on its field (the route's upstream and the canary's), and a
// config document keeps the setting through its JSON round trip.
func TestUpstreamProtocol(t *testing.T) {
	for _, c := range []struct{ in, want string }{{"", ""}, {"http1", ""}, {"h2", "h2"}} {
		r := validRoute()
		r.Upstream.Protocol = c.in
		r.Canary = &tenants.Canary{Weight: 5, Upstream: tenants.Upstream{Protocol: c.in, Targets: []tenants.Target{{URL: "https://next.example.com"}}}}
		if err := r.Validate(strict); err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if r.Upstream.Protocol != c.want || r.Canary.Upstream.Protocol != c.want {
			t.Errorf("%q: stored as %q and %q, want %q", c.in, r.Upstream.Protocol, r.Canary.Upstream.Protocol, c.want)
		}
	}
	for _, c := range []struct{ json, field string }{
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"protocol":"h3"}}`, "upstream.protocol"},
		{`{"upstream":{"targets":[{"url":"https://a.example.com"}],"protocol":"H2"}}`, "upstream.protocol"},
		{`{"canary":{"weight":5,"upstream":{"protocol":"grpc","targets":[{"url":"https://a.example.com"}]}}}`, "canary.upstream.protocol"},
	} {
		r := validRoute()
		if err := json.Unmarshal([]byte(c.json), r); err != nil {
			t.Fatal(err)
		}
		err := r.Validate(strict)
		var te *tenants.Error
		if !errors.As(err, &te) || te.Code != tenants.EValidation || te.Field != c.field || te.Message != "must be http1 or h2; got "+`"`+jsonString(t, c.json, c.field)+`"` {
			t.Errorf("%s: %v, want a validation error on %s naming the value", c.json, err, c.field)
		}
	}

	r := validRoute()
	r.Upstream.Protocol = tenants.ProtocolH2
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: "acme", Routes: []*tenants.Route{r}})
	if err != nil {
		t.Fatal(err)
	}
	var back tenants.ConfigDocument
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Routes) != 1 || back.Routes[0].Upstream.Protocol != tenants.ProtocolH2 {
		t.Fatalf("the document %s lost the protocol", b)
	}
	plain := validRoute()
	if err := plain.Validate(strict); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(plain.Upstream); bytes.Contains(b, []byte("protocol")) {
		t.Errorf("the default protocol is written out: %s", b)
	}
}

// jsonString is the value of the last member of field in the JSON document doc.
func jsonString(t *testing.T, doc, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	var v any = m
	for _, k := range strings.Split(field, ".") {
		v = v.(map[string]any)[k]
	}
	return v.(string)
}
