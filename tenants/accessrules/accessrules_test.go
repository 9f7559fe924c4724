package accessrules_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/casbin/casbin/v2/util"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

func mustCompile(t testing.TB, rules, roles [][]string) *accessrules.Enforcer {
	t.Helper()
	e, err := accessrules.Compile(rules, roles)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e
}

func allow(e *accessrules.Enforcer, method, path string, subjects ...string) bool {
	return e.Allow(subjects, []byte(method), []byte(path))
}

// The pattern language, for allow rules (strict) and deny rules (loose), beside what
// Casbin's keyMatch2 and keyMatch5 would do with the same strings — pinned, so the
// reasons we match ourselves stay visible: keyMatch2 reads ":" anywhere as a parameter
// (/v1/things:batch matches /v1/thingsXYZ, the "prefix surprise"), and "." and "*" as
// regexp; both let a parameter swallow ";" matrix parameters.
func TestPatternSemantics(t *testing.T) {
	cases := []struct {
		pattern, path    string
		allow, deny      bool // does an allow / deny rule with the pattern match
		keyMatch2, keyM5 bool
	}{
		{"/orders", "/orders", true, true, true, true},
		{"/orders", "/orders/", false, true, false, false},
		{"/orders", "/Orders", false, true, false, false},
		{"/orders", "/orders/1", false, false, false, false},
		{"/orders", "/ordersX", false, false, false, false},
		{"/orders/", "/orders", false, true, false, false},
		{"/orders/:id", "/orders/1", true, true, true, false},
		{"/orders/:id", "/orders/1/", false, true, false, false},
		{"/orders/:id", "/orders/", false, false, false, false},
		{"/orders/:id", "/orders", false, false, false, false},
		{"/orders/:id", "/orders/1/items", false, false, false, false},
		{"/orders/:id", "/orders/1;x=1", false, false, true, false},
		{"/orders/:id", "/ORDERS/1", false, true, false, false},
		{"/orders/:id/items", "/orders/1/items", true, true, true, false},
		{"/orders/:id/items", "/orders//items", false, false, false, false},
		{"/orders/*", "/orders", false, true, false, false},
		{"/orders/*", "/orders/", true, true, true, true},
		{"/orders/*", "/orders/1", true, true, true, true},
		{"/orders/*", "/orders/1/items/", true, true, true, true},
		{"/orders/*", "/ordersX/1", false, false, false, false},
		{"/*", "/", true, true, true, true},
		{"/*", "/anything/at/all", true, true, true, true},
		{"/", "/", true, true, true, true},
		{"/", "/a", false, false, false, false},
		{"/v1/things:batch", "/v1/things:batch", true, true, true, true},
		{"/v1/things:batch", "/v1/thingsXYZ", false, false, true, false},
		{"/v1.0/x", "/v1x0/x", false, false, true, true},
		{"/a!b", "/a%21b", false, true, false, false},
		{"/caf%C3%A9", "/caf%C3%A9", true, true, true, true},
		{"/caf%C3%A9", "/café", false, true, false, false},
		{"/café", "/CAF%C3%A9", false, true, false, false},
	}
	for _, c := range cases {
		t.Run(c.pattern+" "+c.path, func(t *testing.T) {
			a := mustCompile(t, [][]string{{"u", c.pattern, "GET"}}, nil)
			d := mustCompile(t, [][]string{{"u", "/*", "GET"}, {"u", c.pattern, "GET", "deny"}}, nil)
			if got := allow(a, "GET", c.path, "u"); got != c.allow {
				t.Errorf("allow rule matches = %v, want %v", got, c.allow)
			}
			// The /* allow rule is strict too; the deny decides.
			if got := !allow(d, "GET", c.path, "u"); got != c.deny && accessrules.NormalPath([]byte(c.path)) {
				t.Errorf("deny rule matches = %v, want %v", got, c.deny)
			}
			if got := util.KeyMatch2(c.path, c.pattern); got != c.keyMatch2 {
				t.Errorf("keyMatch2 = %v, pinned %v", got, c.keyMatch2)
			}
			if got := util.KeyMatch5(c.path, c.pattern); got != c.keyM5 {
				t.Errorf("keyMatch5 = %v, pinned %v", got, c.keyM5)
			}
		})
	}
}

// Compile refuses a bad policy with the field and the rule it breaks.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name         string
		rules, roles [][]string
		field, msg   string
	}{
		{"short rule", [][]string{{"a", "/x"}}, nil, "rules[0]", "got 2 fields"},
		{"long rule", [][]string{{"a", "/x", "GET", "allow", "x"}}, nil, "rules[0]", "got 5 fields"},
		{"empty subject", [][]string{{"", "/x", "GET"}}, nil, "rules[0][0]", "is required"},
		{"padded subject", [][]string{{" a", "/x", "GET"}}, nil, "rules[0][0]", "spaces"},
		{"control subject", [][]string{{"a\x00", "/x", "GET"}}, nil, "rules[0][0]", "control"},
		{"no slash", [][]string{{"a", "x", "GET"}}, nil, "rules[0][1]", "must start with /"},
		{"empty path", [][]string{{"a", "", "GET"}}, nil, "rules[0][1]", "is required"},
		{"double slash", [][]string{{"a", "/a//b", "GET"}}, nil, "rules[0][1]", "empty segments"},
		{"dot dot", [][]string{{"a", "/a/../b", "GET"}}, nil, "rules[0][1]", ". or .."},
		{"star mid", [][]string{{"a", "/a/*/b", "GET"}}, nil, "rules[0][1]", "whole last segment"},
		{"star in segment", [][]string{{"a", "/a*", "GET"}}, nil, "rules[0][1]", "whole last segment"},
		{"param no name", [][]string{{"a", "/a/:", "GET"}}, nil, "rules[0][1]", "needs a name"},
		{"param with suffix", [][]string{{"a", "/a/:id.json", "GET"}}, nil, "rules[0][1]", "whole segment"},
		{"semicolon", [][]string{{"a", "/admin;x=1", "GET"}}, nil, "rules[0][1]", "matrix"},
		{"encoded semicolon", [][]string{{"a", "/admin%3Bx", "GET"}}, nil, "rules[0][1]", "matrix"},
		{"encoded slash", [][]string{{"a", "/a%2Fb", "GET"}}, nil, "rules[0][1]", "refuses"},
		{"lower hex", [][]string{{"a", "/a%3ab", "GET"}}, nil, "rules[0][1]", "upper case (%3A)"},
		{"encoded unreserved", [][]string{{"a", "/%61dmin", "GET"}}, nil, "rules[0][1]", `write 'a' instead of %61`},
		{"bad escape", [][]string{{"a", "/a%zz", "GET"}}, nil, "rules[0][1]", "malformed"},
		{"query", [][]string{{"a", "/a?b", "GET"}}, nil, "rules[0][1]", `'?'`},
		{"space", [][]string{{"a", "/a b", "GET"}}, nil, "rules[0][1]", `' '`},
		{"empty action", [][]string{{"a", "/x", ""}}, nil, "rules[0][2]", "is required"},
		{"lower method", [][]string{{"a", "/x", "get"}}, nil, "rules[0][2]", "write GET"},
		{"unknown method", [][]string{{"a", "/x", "BREW"}}, nil, "rules[0][2]", "not a method"},
		{"star in list", [][]string{{"a", "/x", "GET|*"}}, nil, "rules[0][2]", "cannot be part of a list"},
		{"method twice", [][]string{{"a", "/x", "GET|GET"}}, nil, "rules[0][2]", "twice"},
		{"list with empty", [][]string{{"a", "/x", "GET|"}}, nil, "rules[0][2]", "not a method"},
		{"bad effect", [][]string{{"a", "/x", "GET", "maybe"}}, nil, "rules[0][3]", `"allow" or "deny"`},
		{"duplicate rule", [][]string{{"a", "/x", "GET"}, {"a", "/x", "GET", "allow"}}, nil, "rules[1]", "repeats rules[0]"},
		{"short link", nil, [][]string{{"a"}}, "roles[0]", "[member, role]"},
		{"self link", nil, [][]string{{"a", "a"}}, "roles[0]", "itself"},
		{"star role", nil, [][]string{{"a", "*"}}, "roles[0][1]", "any caller"},
		{"duplicate link", nil, [][]string{{"a", "b"}, {"a", "b"}}, "roles[1]", "repeats roles[0]"},
		{"cycle", nil, [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}}, "roles", "cycle: a → b → c → a"},
		{"too deep", nil, chain(12), "roles", "levels deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := accessrules.Compile(c.rules, c.roles)
			var te *tenants.Error
			if !errors.As(err, &te) || te.Code != tenants.EValidation {
				t.Fatalf("err = %v, want a validation error", err)
			}
			if te.Field != c.field || !strings.Contains(te.Message, c.msg) {
				t.Fatalf("field %q message %q; want field %q message containing %q", te.Field, te.Message, c.field, c.msg)
			}
		})
	}
}

func chain(n int) [][]string {
	var out [][]string
	for i := 0; i < n; i++ {
		out = append(out, []string{fmt.Sprintf("r%d", i), fmt.Sprintf("r%d", i+1)})
	}
	return out
}

// Subjects, roles and effects.
func TestRBAC(t *testing.T) {
	e := mustCompile(t, [][]string{
		{"reader", "/orders/:id", "GET"},
		{"writer", "/orders/:id", "PUT|PATCH"},
		{"admin", "/admin/*", "*"},
		{"alice", "/me", "GET"},
		{"*", "/health", "GET"},
		{"banned", "/*", "*", "deny"},
		{"*", "/orders/:id/secret", "*", "deny"},
		{"reader", "/orders/:id/secret", "GET"},
	}, [][]string{
		{"alice", "writer"},
		{"writer", "reader"},
		{"bob", "admin"},
	})
	cases := []struct {
		subjects []string
		method   string
		path     string
		want     bool
	}{
		{[]string{"alice"}, "GET", "/orders/7", true},       // alice → writer → reader
		{[]string{"alice"}, "PATCH", "/orders/7", true},     // alice → writer
		{[]string{"alice"}, "DELETE", "/orders/7", false},   // nobody may
		{[]string{"alice"}, "GET", "/me", true},             // the consumer itself
		{[]string{"bob"}, "GET", "/me", false},              // another consumer
		{[]string{"bob"}, "DELETE", "/admin/users/1", true}, // bob → admin
		{[]string{"alice"}, "GET", "/admin/users", false},
		{[]string{"carol", "reader"}, "GET", "/orders/1", true}, // a role from the token
		{[]string{"carol"}, "GET", "/orders/1", false},
		{[]string{"carol"}, "GET", "/health", true},        // any identified caller
		{nil, "GET", "/health", false},                     // no identity, no decision
		{[]string{""}, "GET", "/health", false},            // empty subjects are ignored
		{[]string{"alice", "banned"}, "GET", "/me", false}, // a deny on any subject wins
		{[]string{"bob", "banned"}, "GET", "/admin/x", false},
		{[]string{"alice"}, "GET", "/orders/1/secret", false}, // deny beats the allow
		{[]string{"alice"}, "get", "/orders/7", false},        // methods are case-sensitive for allow
		{[]string{"alice"}, "HEAD", "/orders/7", false},       // GET does not allow HEAD
	}
	for _, c := range cases {
		if got := e.Allow(c.subjects, []byte(c.method), []byte(c.path)); got != c.want {
			t.Errorf("Allow(%q, %s %s) = %v, want %v", c.subjects, c.method, c.path, got, c.want)
		}
		if got := e.Decide(c.subjects, []byte(c.method), []byte(c.path)); got != c.want {
			t.Errorf("uncached Decide(%q, %s %s) = %v, want %v", c.subjects, c.method, c.path, got, c.want)
		}
	}
	empty := mustCompile(t, nil, nil)
	if allow(empty, "GET", "/", "alice") {
		t.Error("an empty policy allows")
	}
}

// Deny rules catch method case and HEAD for GET.
func TestDenyMethods(t *testing.T) {
	e := mustCompile(t, [][]string{{"u", "/*", "*"}, {"u", "/admin", "GET", "deny"}}, nil)
	for _, m := range []string{"GET", "get", "Get", "HEAD", "head"} {
		if allow(e, m, "/admin", "u") {
			t.Errorf("%s /admin allowed past deny GET", m)
		}
	}
	if !allow(e, "POST", "/admin", "u") {
		t.Error("POST /admin denied by a GET deny")
	}
}

// Hostile paths, against an allow-list policy and a deny policy. Each raw path is what a
// client sends; "normal" is what the edge's normalization (edge/path.go) makes of it,
// or "" when the edge refuses it with 400 — written out by hand from the rules in
// path.go, since the edge's normalizer is internal to it. Allow must refuse the raw form
// whenever it is not already normal (a caller that skipped normalization fails closed),
// and decide the normal form safely.
func TestHostilePaths(t *testing.T) {
	allowList := mustCompile(t, [][]string{
		{"user", "/orders/:id", "GET"},
		{"user", "/public/*", "GET"},
	}, nil)
	denyAdmin := mustCompile(t, [][]string{
		{"user", "/*", "*"},
		{"user", "/admin", "*", "deny"},
		{"user", "/admin/*", "*", "deny"},
		{"user", "/internal/:svc/debug", "*", "deny"},
	}, nil)
	cases := []struct {
		raw, normal string
		// want* are the decisions on the normal form ("" normal: refused by the edge).
		wantAllowList, wantDeny bool
	}{
		{"/orders/1", "/orders/1", true, true},
		{"/public/a/../../admin", "/admin", false, false},
		{"/public/%2e%2e/%2E%2E/admin", "/admin", false, false},
		{"/public/%2e%2e/orders/1/../../admin/x", "/admin/x", false, false},
		{"/orders/1/..", "/orders/", false, true},
		{"/orders/1/.", "/orders/1/", false, true},
		{"/public/..%2fadmin", "", false, false},
		{"/admin%2Fusers", "", false, false},
		{"/admin%5cusers", "", false, false},
		{"//admin", "/admin", false, false},
		{"/admin//users", "/admin/users", false, false},
		{"/Admin", "/Admin", false, false},
		{"/ADMIN/users", "/ADMIN/users", false, false},
		{"/%61dmin", "/admin", false, false},
		{"/adm%49n", "/admIn", false, false},
		{"/admin/", "/admin/", false, false},
		{"/admin;x=1", "/admin;x=1", false, false},
		{"/admin;", "/admin;", false, false},
		{"/admin%3bx=1", "/admin%3Bx=1", false, false},
		{"/orders/1;jsessionid=x", "/orders/1;jsessionid=x", false, false},
		{"/public/x;/../../admin", "/admin", false, false},
		{"/Orders/1", "/Orders/1", false, true},
		{"/orders/1/", "/orders/1/", false, true},
		{"/internal/billing/debug", "/internal/billing/debug", false, false},
		{"/internal/billing/DEBUG/", "/internal/billing/DEBUG/", false, false},
		{"/internal/%62illing/debug", "/internal/billing/debug", false, false},
		{"/internal/bill%21ng/debug", "/internal/bill%21ng/debug", false, false},
		{"/admin%00", "", false, false},
		{"/admin%zz", "", false, false},
		{"/admin\\x", "", false, false},
		{"/admin x", "", false, false},
		{"/..", "", false, false},
		{"/public/x", "/public/x", true, true},
		{"/public", "/public", false, true},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			for _, e := range []*accessrules.Enforcer{allowList, denyAdmin} {
				if c.raw != c.normal && allow(e, "GET", c.raw, "user") {
					t.Errorf("raw, unnormalized path %q allowed", c.raw)
				}
			}
			if c.normal == "" {
				return
			}
			if got := allow(allowList, "GET", c.normal, "user"); got != c.wantAllowList {
				t.Errorf("allow-list policy on %q = %v, want %v", c.normal, got, c.wantAllowList)
			}
			if got := allow(denyAdmin, "GET", c.normal, "user"); got != c.wantDeny {
				t.Errorf("deny policy on %q = %v, want %v", c.normal, got, c.wantDeny)
			}
		})
	}
}

// Cached and uncached answers agree, under concurrency, with more distinct requests
// than the cache has slots, and keys cannot be confused by subject boundaries.
func TestDecisionCache(t *testing.T) {
	e := mustCompile(t, [][]string{{"ab", "/x", "GET"}, {"u", "/orders/:id", "GET"}, {"u", "/orders/13", "GET", "deny"}}, nil)
	// ["a","b"] must not hit the entry of ["ab"], nor the reverse.
	if !allow(e, "GET", "/x", "ab") || allow(e, "GET", "/x", "a", "b") || !allow(e, "GET", "/x", "ab") {
		t.Fatal("subject boundaries confused")
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				n := (i*7 + g) % 9000
				path := []byte(fmt.Sprintf("/orders/%d", n))
				want := n != 13
				for r := 0; r < 2; r++ {
					if got := e.Allow([]string{"u"}, []byte("GET"), path); got != want {
						t.Errorf("Allow %s = %v", path, got)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	// A request too long for the cache is still decided.
	long := "/orders/" + strings.Repeat("9", 3000)
	if !allow(e, "GET", long, "u") {
		t.Fatal("long path not decided")
	}
}
