package accessrules_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"tollgate/tenants/accessrules"
)

var fuzzRules = [][]string{
	{"user", "/orders/:id", "GET|HEAD"},
	{"user", "/orders/:id/items/*", "*"},
	{"user", "/public/*", "GET"},
	{"admin", "/*", "*"},
	{"*", "/admin/*", "*", "deny"},
	{"user", "/v1/things:batch", "POST"},
	{"user", "/caf%C3%A9", "GET"},
	{"user", "/a!b/", "GET"},
	{"banned", "/*", "*", "deny"},
	{"*", "/internal/:x/debug", "GET", "deny"},
	{"bob", "/", "DELETE"},
}

var fuzzRoles = [][]string{{"alice", "user"}, {"root", "admin"}, {"admin", "user"}}

// FuzzAllow: Allow never panics, agrees with its uncached self, never allows a path
// outside the edge's normal form, with ";" or one CheckPath refuses, and on normal paths agrees with an
// independent evaluator (patterns as anchored regexps, roles expanded by hand).
func FuzzAllow(f *testing.F) {
	e := mustCompile(f, fuzzRules, fuzzRoles)
	ref := newReference(fuzzRules, fuzzRoles)
	for _, s := range [][3]string{
		{"alice", "GET", "/orders/1"},
		{"alice", "GET", "/orders/1/"},
		{"alice", "get", "/Orders/1"},
		{"root", "GET", "/admin/x"},
		{"root", "HEAD", "/ADMIN"},
		{"alice,banned", "GET", "/public/x"},
		{"alice", "GET", "/public/../admin"},
		{"alice", "GET", "/admin;x=1"},
		{"alice", "GET", "/orders/1%3Bx"},
		{"root", "GET", "/internal/%62/DEBUG/"},
		{"alice", "GET", "/caf%C3%A9"},
		{"alice", "GET", "/a%21b"},
		{"bob", "DELETE", "/"},
		{"", "GET", "//"},
		{"alice", "GET", "/admin."},
		{"alice", "GET", "/admin%20"},
		{"alice", "GET", "/admin%09"},
		{"alice", "GET", "/admin./x"},
		{"alice", "GET", "/ａｄｍｉｎ"},
		{"alice", "GET", "/%EF%BD%81dmin/x"},
		{"root", "GET", "/public/x%E3%80%80"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, subjects, method, path string) {
		subs := strings.Split(subjects, ",")
		got := e.Allow(subs, []byte(method), []byte(path))
		if again := e.Allow(subs, []byte(method), []byte(path)); again != got {
			t.Fatalf("cached answer %v differs from first %v", again, got)
		}
		if unc := e.Decide(subs, []byte(method), []byte(path)); unc != got {
			t.Fatalf("uncached %v, cached %v", unc, got)
		}
		if got {
			if strings.Contains(path, ";") || strings.Contains(strings.ToUpper(path), "%3B") ||
				!strings.HasPrefix(path, "/") || strings.Contains(path, "//") ||
				strings.Contains(path+"/", "/../") || strings.Contains(path+"/", "/./") {
				t.Fatalf("allowed a path outside the normal form: %q", path)
			}
		}
		if got && accessrules.CheckPath([]byte(path)) != nil {
			t.Fatalf("allowed %q, which CheckPath refuses", path)
		}
		if !accessrules.NormalPath([]byte(path)) {
			if got {
				t.Fatalf("allowed %q, which is not in normal form", path)
			}
			return
		}
		if want := ref.allow(subs, method, path); got != want {
			t.Fatalf("Allow(%q, %q, %q) = %v, reference says %v", subs, method, path, got, want)
		}
	})
}

// reference evaluates a policy the slow, obvious way.
type reference struct {
	rules []refRule
	roles map[string][]string
}

type refRule struct {
	sub     string
	strict  *regexp.Regexp
	loose   *regexp.Regexp
	methods []string // nil: any
	deny    bool
}

func newReference(rules, roles [][]string) *reference {
	r := &reference{roles: map[string][]string{}}
	for _, l := range roles {
		r.roles[l[0]] = append(r.roles[l[0]], l[1])
	}
	for _, x := range rules {
		rr := refRule{sub: x[0], strict: patternRegexp(x[1], false), loose: patternRegexp(x[1], true), deny: len(x) == 4 && x[3] == "deny"}
		if x[2] != "*" {
			rr.methods = strings.Split(x[2], "|")
		}
		r.rules = append(r.rules, rr)
	}
	return r
}

func patternRegexp(p string, loose bool) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("(?s)^")
	for _, s := range strings.Split(p[1:], "/") {
		b.WriteString("/")
		switch {
		case s == "*":
			b.WriteString(".*")
		case strings.HasPrefix(s, ":"):
			b.WriteString("[^/]+")
		case loose:
			b.WriteString(regexp.QuoteMeta(refLoose(s)))
		default:
			b.WriteString(regexp.QuoteMeta(s))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// refLoose decodes percent-escapes and lower-cases ASCII letters.
func refLoose(s string) string {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			var v byte
			ok := true
			for _, h := range []byte{s[i+1], s[i+2]} {
				switch {
				case h >= '0' && h <= '9':
					v = v<<4 | (h - '0')
				case h >= 'a' && h <= 'f':
					v = v<<4 | (h - 'a' + 10)
				case h >= 'A' && h <= 'F':
					v = v<<4 | (h - 'A' + 10)
				default:
					ok = false
				}
			}
			if ok {
				c = v
				i += 2
			}
		}
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		out = append(out, c)
	}
	return string(out)
}

func (r *reference) expand(subjects []string) []string {
	var out []string
	var add func(string)
	add = func(s string) {
		if s == "" || slices.Contains(out, s) {
			return
		}
		out = append(out, s)
		for _, x := range r.roles[s] {
			add(x)
		}
	}
	for _, s := range subjects {
		add(s)
	}
	return out
}

func (r *reference) allow(subjects []string, method, path string) bool {
	subs := r.expand(subjects)
	if len(subs) == 0 || method == "" {
		return false
	}
	loose := refLoose(path)
	toggled := loose + "/"
	if strings.HasSuffix(loose, "/") && loose != "/" {
		toggled = loose[:len(loose)-1]
	}
	allowed := false
	for _, x := range r.rules {
		if x.sub != "*" && !slices.Contains(subs, x.sub) {
			continue
		}
		if x.deny {
			mOK := x.methods == nil
			for _, m := range x.methods {
				if strings.EqualFold(m, method) || m == "GET" && strings.EqualFold(method, "HEAD") {
					mOK = true
				}
			}
			if mOK && (x.loose.MatchString(loose) || x.loose.MatchString(toggled)) {
				return false
			}
			continue
		}
		if (x.methods == nil || slices.Contains(x.methods, method)) && x.strict.MatchString(path) {
			allowed = true
		}
	}
	return allowed
}
