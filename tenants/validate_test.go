package tenants_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

var strict = &tenants.UpstreamAddressRule{GatewayPorts: []int{8000, 8080, 9000}, EdgeDomain: "localhost"}

var devAddressRule = &tenants.UpstreamAddressRule{
	AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	GatewayPorts: []int{8000, 8080, 9000},
	EdgeDomain:   "tollgate.test",
}

func validRoute() *tenants.Route {
	return &tenants.Route{
		Name:     "hello",
		Paths:    []string{"/hello"},
		Methods:  []string{"get"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://Example.com/base/"}}},
	}
}

func TestRouteValidateDefaults(t *testing.T) {
	r := validRoute()
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	if r.Methods[0] != "GET" || r.Auth != tenants.AuthNone || r.Upstream.Targets[0].Weight != 1 ||
		r.Upstream.Targets[0].URL != "https://example.com/base" || r.MaxBodyBytes != tenants.DefaultMaxBodyBytes ||
		r.TimeoutMS != tenants.DefaultTimeoutMS || r.ConnectTimeoutMS != tenants.DefaultConnectTimeoutMS {
		t.Fatalf("defaults not applied: %+v", r)
	}
}

// Every rule with a rejected example: the field named and a message that says the rule.
func TestRouteValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		policy *tenants.UpstreamAddressRule
		mut    func(r *tenants.Route)
		field  string
		msg    string
	}{
		{"no name", strict, func(r *tenants.Route) { r.Name = "" }, "name", "required"},
		{"control char name", strict, func(r *tenants.Route) { r.Name = "a\x00b" }, "name", "control"},
		{"long name", strict, func(r *tenants.Route) { r.Name = strings.Repeat("x", 101) }, "name", "at most 100"},
		{"no paths", strict, func(r *tenants.Route) { r.Paths = nil }, "paths", "at least one"},
		{"relative path", strict, func(r *tenants.Route) { r.Paths = []string{"hello"} }, "paths[0]", "start with /"},
		{"dot dot", strict, func(r *tenants.Route) { r.Paths = []string{"/a/../b"} }, "paths[0]", ". or .."},
		{"double slash", strict, func(r *tenants.Route) { r.Paths = []string{"/a//b"} }, "paths[0]", "empty segments"},
		{"encoded", strict, func(r *tenants.Route) { r.Paths = []string{"/a%2fb"} }, "paths[0]", "percent-encoded"},
		{"query", strict, func(r *tenants.Route) { r.Paths = []string{"/a?b"} }, "paths[0]", "may not contain"},
		{"space", strict, func(r *tenants.Route) { r.Paths = []string{"/a b"} }, "paths[0]", "may not contain"},
		{"dup path", strict, func(r *tenants.Route) { r.Paths = []string{"/a", "/a"} }, "paths[1]", "twice"},
		{"exact empty", strict, func(r *tenants.Route) { r.Paths = []string{"="} }, "paths[0]", "required"},
		{"param in segment", strict, func(r *tenants.Route) { r.Paths = []string{"/a{b}"} }, "paths[0]", "a parameter is a whole segment"},
		{"param after literal", strict, func(r *tenants.Route) { r.Paths = []string{"/users/{id}.json"} }, "paths[0]", "a parameter is a whole segment"},
		{"lone brace", strict, func(r *tenants.Route) { r.Paths = []string{"/a}"} }, "paths[0]", "a parameter is a whole segment"},
		{"empty param", strict, func(r *tenants.Route) { r.Paths = []string{"/users/{}"} }, "paths[0]", "needs a name of 1 to 64"},
		{"long param", strict, func(r *tenants.Route) { r.Paths = []string{"/{" + strings.Repeat("p", 65) + "}"} }, "paths[0]", "needs a name of 1 to 64"},
		{"param name", strict, func(r *tenants.Route) { r.Paths = []string{"/{user-id}"} }, "paths[0]", "letters, digits and '_'"},
		{"nested braces", strict, func(r *tenants.Route) { r.Paths = []string{"/{{id}}"} }, "paths[0]", "letters, digits and '_'"},
		{"param twice", strict, func(r *tenants.Route) { r.Paths = []string{"/{id}/x/{id}"} }, "paths[0]", "names parameter {id} twice"},
		{"same pattern", strict, func(r *tenants.Route) { r.Paths = []string{"=/users/{id}", "=/users/{uid}"} }, "paths[1]", "=/users/{uid} is =/users/{id} with other parameter names"},
		{"too many paths", strict, func(r *tenants.Route) { r.Paths = make([]string, 33) }, "paths", "at most 32"},
		{"bad method", strict, func(r *tenants.Route) { r.Methods = []string{"FETCH"} }, "methods[0]", "not a method"},
		{"trace", strict, func(r *tenants.Route) { r.Methods = []string{"TRACE"} }, "methods[0]", "not a method"},
		{"dup method", strict, func(r *tenants.Route) { r.Methods = []string{"GET", "get"} }, "methods[1]", "twice"},
		{"no targets", strict, func(r *tenants.Route) { r.Upstream.Targets = nil }, "upstream.targets", "at least one"},
		{"ftp", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "ftp://example.com" }, "upstream.targets[0].url", "http:// or https://"},
		{"no host", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://" }, "upstream.targets[0].url", "host"},
		{"userinfo", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://u:p@example.com" }, "upstream.targets[0].url", "credentials"},
		{"query url", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://example.com/?a=1" }, "upstream.targets[0].url", "query"},
		{"loopback", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://127.0.0.1:3000" }, "upstream.targets[0].url", "loopback"},
		{"localhost", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://localhost:3000" }, "upstream.targets[0].url", "loopback"},
		{"ipv6 loopback", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[::1]:3000" }, "upstream.targets[0].url", "loopback"},
		{"mapped loopback", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[::ffff:127.0.0.1]/" }, "upstream.targets[0].url", "loopback"},
		{"metadata", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://169.254.169.254/" }, "upstream.targets[0].url", "link-local"},
		{"private", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://10.0.0.1/" }, "upstream.targets[0].url", "private"},
		{"unspecified", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://0.0.0.0/" }, "upstream.targets[0].url", "unspecified"},
		{"benchmarking", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://198.18.0.1/" }, "upstream.targets[0].url", "198.18.0.1 is in 198.18.0.0/15, benchmarking (RFC 2544), which upstreams may not use"},
		{"shared", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://100.64.0.1/" }, "upstream.targets[0].url", "shared address space"},
		{"nat64 loopback", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[64:ff9b::a9fe:a9fe]/" }, "upstream.targets[0].url", "link-local"},
		{"6to4 loopback", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[2002:7f00:1::1]/" }, "upstream.targets[0].url", "loopback"},
		{"unique local", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[fd00::1]/" }, "upstream.targets[0].url", "unique-local"},
		{"documentation v6", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://[3fff::1]/" }, "upstream.targets[0].url", "documentation (RFC 9637)"},
		{"short ipv4", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://127.1/" }, "upstream.targets[0].url", "shorthand form"},
		{"decimal ipv4", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://2130706433:8080/" }, "upstream.targets[0].url", "shorthand form"},
		{"hex ipv4", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://0x7f.0x1/" }, "upstream.targets[0].url", "shorthand form"},
		{"octal ipv4", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://0177.0.0.01/" }, "upstream.targets[0].url", "shorthand form"},
		{"broadcast", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://255.255.255.255/" }, "upstream.targets[0].url", "limited broadcast"},
		{"canary target", strict, func(r *tenants.Route) {
			r.Canary = &tenants.Canary{Weight: 5, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://192.0.0.170/"}}}}
		}, "canary.upstream.targets[0].url", "NAT64/DNS64 discovery"},
		{"own port allowed range", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://127.0.0.1:8000" }, "upstream.targets[0].url", "gateway's own"},
		{"own edge domain", devAddressRule, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://x.tollgate.test:8000" }, "upstream.targets[0].url", "gateway's own edge"},
		{"bad port", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://example.com:99999" }, "upstream.targets[0].url", "port"},
		{"bad host", strict, func(r *tenants.Route) { r.Upstream.Targets[0].URL = "http://exa mple.com" }, "upstream.targets[0].url", ""},
		{"negative weight", strict, func(r *tenants.Route) { r.Upstream.Targets[0].Weight = -1 }, "upstream.targets[0].weight", "between 0 and 1000"},
		{"huge weight", strict, func(r *tenants.Route) { r.Upstream.Targets[0].Weight = 1001 }, "upstream.targets[0].weight", "between 0 and 1000"},
		{"bad auth", strict, func(r *tenants.Route) { r.Auth = "basic" }, "auth", "none, key, jwt, key_or_jwt"},
		{"zero rps", strict, func(r *tenants.Route) { r.RateLimit = &tenants.RateLimit{RPS: 0} }, "rate_limit.rps", "between 1"},
		{"negative burst", strict, func(r *tenants.Route) { r.RateLimit = &tenants.RateLimit{RPS: 5, Burst: -1} }, "rate_limit.burst", "between 1"},
		{"negative body", strict, func(r *tenants.Route) { r.MaxBodyBytes = -1 }, "max_body_bytes", "between 1"},
		{"huge body", strict, func(r *tenants.Route) { r.MaxBodyBytes = 2 << 30 }, "max_body_bytes", "between 1"},
		{"timeout", strict, func(r *tenants.Route) { r.TimeoutMS = 400_000 }, "timeout_ms", "between 1"},
		{"connect timeout", strict, func(r *tenants.Route) { r.ConnectTimeoutMS = -5 }, "connect_timeout_ms", "between 1"},
		{"function auth without functions", strict, func(r *tenants.Route) { r.Auth = tenants.AuthFunction }, "functions", "auth function needs at least one function"},
		{"too many functions", strict, func(r *tenants.Route) { r.Functions = make([]tenants.FunctionRef, 9) }, "functions", "at most 8"},
		{"function name", strict, func(r *tenants.Route) { r.Functions = []tenants.FunctionRef{{Name: "Sign Me"}} }, "functions[0].name", "lowercase letters"},
		{"no function name", strict, func(r *tenants.Route) { r.Functions = []tenants.FunctionRef{{Name: "a"}, {}} }, "functions[1].name", "required"},
		{"function config", strict, func(r *tenants.Route) {
			r.Functions = []tenants.FunctionRef{{Name: "sign", Config: strings.Repeat("x", 64<<10+1)}}
		}, "functions[0].config", "at most 65536 bytes"},
		{"function sha", strict, func(r *tenants.Route) { r.Functions = []tenants.FunctionRef{{Name: "sign", SHA256: "abc"}} }, "functions[0].sha256", "64 hex digits"},
		{"function sha not hex", strict, func(r *tenants.Route) {
			r.Functions = []tenants.FunctionRef{{Name: "sign", SHA256: strings.Repeat("g", 64)}}
		}, "functions[0].sha256", "64 hex digits"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validRoute()
			tc.mut(r)
			err := r.Validate(tc.policy)
			if tenants.ErrorCode(err) != tenants.EValidation {
				t.Fatalf("want validation error, got %v", err)
			}
			e := err.(*tenants.Error)
			if e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("want field %q with %q, got field %q: %s", tc.field, tc.msg, e.Field, e.Message)
			}
		})
	}
}

func TestRouteFunctions(t *testing.T) {
	r := validRoute()
	sha := strings.Repeat("AB", 32)
	r.Auth = tenants.AuthFunction
	r.Functions = []tenants.FunctionRef{{Name: "hmac-auth", Config: strings.Repeat("c", 64<<10)}, {Name: "add_header", SHA256: sha}, {Name: "hmac-auth"}}
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	if r.Functions[1].SHA256 != strings.ToLower(sha) {
		t.Fatalf("sha256 not lowercased: %s", r.Functions[1].SHA256)
	}
	r.Functions = make([]tenants.FunctionRef, tenants.MaxRouteFunctions)
	for i := range r.Functions {
		r.Functions[i].Name = "f"
	}
	if err := r.Validate(strict); err != nil {
		t.Fatalf("%d functions: %v", tenants.MaxRouteFunctions, err)
	}
}

func TestValidatePathParams(t *testing.T) {
	for _, p := range []string{"/users/{id}", "=/users/{id}", "/users/{id}/", "/{a}/{b_2}/c", "=/{" + strings.Repeat("p", 64) + "}", "/users/{ID}/orders"} {
		if err := tenants.ValidatePath(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"/users/{id}":        "/users/{}",
		"=/users/{id}/x/{y}": "=/users/{}/x/{}",
		"/users/{id}/":       "/users/{}/",
		"/plain":             "/plain",
	} {
		if got := tenants.PathPattern(p); got != want {
			t.Errorf("PathPattern(%s) = %s, want %s", p, got, want)
		}
	}
}

func TestAllowedRanges(t *testing.T) {
	r := validRoute()
	r.Upstream.Targets[0].URL = "http://127.0.0.1:3000"
	if err := r.Validate(devAddressRule); err != nil {
		t.Fatalf("127.0.0.0/8 allowed by the operator: %v", err)
	}
}

func TestSlug(t *testing.T) {
	for _, ok := range []string{"a", "acme", "acme-2", "0", strings.Repeat("a", 63)} {
		if err := tenants.ValidateSlug(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, msg := range map[string]string{
		"": "required", "-a": "start or end", "a-": "start or end", "Acme": "lowercase",
		"a.b": "lowercase", "a_b": "lowercase", strings.Repeat("a", 64): "63", "api": "reserved", "ümlaut": "lowercase",
	} {
		err := tenants.ValidateSlug(bad)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: want error with %q, got %v", bad, msg, err)
		}
	}
}

func TestPlanAndConsumer(t *testing.T) {
	for _, p := range []tenants.ConsumerPlan{
		{Name: ""}, {Name: "Gold"}, {Name: "gold", Quota: &tenants.Quota{Requests: 0}},
		{Name: "gold", Concurrency: -1}, {Name: "gold", RateLimit: &tenants.RateLimit{RPS: 2_000_000}},
	} {
		if tenants.ErrorCode(p.Validate()) != tenants.EValidation {
			t.Errorf("plan %+v accepted", p)
		}
	}
	c := tenants.Consumer{Name: "mobile", Plan: "Gold!"}
	if tenants.ErrorCode(c.Validate()) != tenants.EValidation {
		t.Error("bad consumer plan accepted")
	}
}

func TestDecodeEntryRefusesMisfiled(t *testing.T) {
	route := &tenants.Route{ID: "r1", TenantID: "t1", Name: "x"}
	v, _ := json.Marshal(tenants.Entry{Rev: 1, Route: route})
	if _, _, err := tenants.DecodeEntry("t1.route.r1", v); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"t2.route.r1", "t1.route.r2", "t1.consumer.r1", "t1.tenant", "t1.route", "t1.route.r1.x", "t1"} {
		if _, _, err := tenants.DecodeEntry(key, v); err == nil {
			t.Errorf("%s: misfiled entry accepted", key)
		}
	}
	two, _ := json.Marshal(tenants.Entry{Rev: 1, Route: route, Tenant: &tenants.Tenant{ID: "t1"}})
	if _, _, err := tenants.DecodeEntry("t1.route.r1", two); err == nil {
		t.Error("entry with two objects accepted")
	}
}

func TestSecret(t *testing.T) {
	plain, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	if !strings.HasPrefix(plain, "tg_") || len(plain) != 35 || hash != tenants.HashSecret(plain) || !strings.HasPrefix(plain, display) {
		t.Fatalf("%s %s %s", plain, hash, display)
	}
}

func TestCodesHaveStatuses(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range tenants.Codes {
		if seen[c.Code] || c.Status < 400 || tenants.Status(c.Code) != c.Status {
			t.Errorf("code %s", c.Code)
		}
		seen[c.Code] = true
	}
	if tenants.Status("nope") != 500 {
		t.Error("unknown code is not 500")
	}
}

func TestParseAuditRange(t *testing.T) {
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	for _, c := range []struct {
		from, to     string
		wantF, wantT time.Time
		field        string
	}{
		{"", "", time.Time{}, time.Time{}, ""},
		{"2026-11-01", "2026-11-30", day("2026-11-01"), day("2026-12-01"), ""},
		{"2026-11-01T10:00:00Z", "", day("2026-11-01").Add(10 * time.Hour), time.Time{}, ""},
		{"yesterday", "", time.Time{}, time.Time{}, "from"},
		{"", "2026-13-01", time.Time{}, time.Time{}, "to"},
		{"2026-11-02", "2026-11-01", time.Time{}, time.Time{}, "to"},
	} {
		f, to, err := tenants.ParseAuditRange(c.from, c.to)
		var e *tenants.Error
		if c.field != "" {
			if !errors.As(err, &e) || e.Field != c.field {
				t.Errorf("%q..%q: %v, want an error on %s", c.from, c.to, err, c.field)
			}
			continue
		}
		if err != nil || !f.Equal(c.wantF) || !to.Equal(c.wantT) {
			t.Errorf("%q..%q: %v %v %v", c.from, c.to, f, to, err)
		}
	}
}
