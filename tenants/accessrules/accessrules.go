// Package accessrules is the engine of a tenant's access rules (tenants.AccessRules, the
// "policy" of the management API): it decides, for one tenant, whether a caller may make
// a request from the tenant's rules (subject, path pattern, action, allow|deny) and role
// links, evaluated by Casbin under the model in model.conf. The api and the console
// validate with it, and the edge compiles it again for each snapshot.
//
// An Enforcer is compiled once per tenant snapshot and is immutable; Allow is safe for
// concurrent use and, for a (subjects, method, path) it has decided before, answers
// from a bounded lock-free cache without running any matcher. There is nothing to
// invalidate: a change of the rules compiles a new Enforcer (with an empty cache) and the
// snapshot swap retires the old one.
//
// Allow decides on the path exactly as the upstream receives it: the edge's normalized
// path (edge/path.go), before any strip_prefix. Any path not in that normal form, any
// path containing ";", and any path CheckPath refuses, is denied. See pattern.go for the pattern language and how allow
// and deny rules match differently.
//
// The package must not do I/O or depend on the edge's internals; it knows only strings.
package accessrules

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/casbin/casbin/v2"
	"github.com/casbin/casbin/v2/model"

	"tollgate/tenants"
)

//go:embed model.conf
var modelText string

// Rule effects (a rule's optional fourth field). Default: EffectAllow.
const (
	EffectAllow = "allow"
	EffectDeny  = "deny"
)

// AnySubject as a rule's subject matches every caller that has an identity.
const AnySubject = "*"

// Bounds of a tenant's access rules.
const (
	MaxRules      = 1000
	MaxRoleLinks  = 10000
	MaxSubjectLen = 256
	MaxRoleDepth  = 10 // Casbin's default hierarchy limit
	// maxKeyLen bounds a decision cache key; longer requests are decided uncached.
	maxKeyLen = 2048
)

// Methods a rule's action may name ("*" is every method).
var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Enforcer is one tenant's compiled access rules.
type Enforcer struct {
	casbin   *casbin.Enforcer
	patterns []*pattern
	byPat    map[string]int     // pattern source → index in patterns
	actions  map[string]*action // action source → parsed
	closure  map[string][]string
	cache    decisionCache // by request: subjects, method, path
	classes  decisionCache // by class: subjects, method, pattern match bits
	rules    int
}

// action is a rule's action: every method, or a list.
type action struct {
	any     bool
	methods []string
}

// Compile validates a tenant's access rules and compiles them. rules are [subject, path,
// action] or [subject, path, action, effect]; roles are [member, role] links (a member is
// a consumer or a role; roles may inherit roles). Errors are *tenants.Error with code
// EValidation, Field a JSON path into the access rules' body ("rules[2][1]") and a message
// saying which rule failed — the api returns them as they are for PUT .../policy.
func Compile(rules [][]string, roles [][]string) (*Enforcer, error) {
	if len(rules) > MaxRules {
		return nil, tenants.Invalid("rules", "may have at most %d rules, got %d", MaxRules, len(rules))
	}
	if len(roles) > MaxRoleLinks {
		return nil, tenants.Invalid("roles", "may have at most %d links, got %d", MaxRoleLinks, len(roles))
	}
	e := &Enforcer{byPat: make(map[string]int), actions: make(map[string]*action), rules: len(rules)}
	e.classes.size = classSlots
	norm := make([][]string, len(rules))
	seen := make(map[[4]string]int, len(rules))
	for i, r := range rules {
		f := fmt.Sprintf("rules[%d]", i)
		if len(r) != 3 && len(r) != 4 {
			return nil, tenants.Invalid(f, "must be [subject, path, action] or [subject, path, action, \"allow\"|\"deny\"], got %d fields", len(r))
		}
		if err := checkSubject(r[0], true); err != nil {
			return nil, tenants.Invalid(f+"[0]", "%v", err)
		}
		if _, ok := e.byPat[r[1]]; !ok {
			p, err := compilePattern(r[1])
			if err != nil {
				return nil, tenants.Invalid(f+"[1]", "%v", err)
			}
			e.byPat[r[1]] = len(e.patterns)
			e.patterns = append(e.patterns, p)
		}
		if _, ok := e.actions[r[2]]; !ok {
			a, err := parseAction(r[2])
			if err != nil {
				return nil, tenants.Invalid(f+"[2]", "%v", err)
			}
			e.actions[r[2]] = a
		}
		eft := EffectAllow
		if len(r) == 4 {
			eft = r[3]
			if eft != EffectAllow && eft != EffectDeny {
				return nil, tenants.Invalid(f+"[3]", "must be %q or %q, got %q", EffectAllow, EffectDeny, eft)
			}
		}
		if p := e.patterns[e.byPat[r[1]]]; eft == EffectDeny {
			p.inDeny = true
		} else {
			p.inAllow = true
		}
		key := [4]string{r[0], r[1], r[2], eft}
		if j, dup := seen[key]; dup {
			return nil, tenants.Invalid(f, "repeats rules[%d]", j)
		}
		seen[key] = i
		norm[i] = []string{r[0], r[1], r[2], eft}
	}

	links := make(map[string][]string)
	seenLink := make(map[[2]string]int, len(roles))
	for i, l := range roles {
		f := fmt.Sprintf("roles[%d]", i)
		if len(l) != 2 {
			return nil, tenants.Invalid(f, "must be [member, role], got %d fields", len(l))
		}
		for j, s := range l {
			if err := checkSubject(s, false); err != nil {
				return nil, tenants.Invalid(fmt.Sprintf("%s[%d]", f, j), "%v", err)
			}
		}
		if l[0] == l[1] {
			return nil, tenants.Invalid(f, "links %q to itself", l[0])
		}
		k := [2]string{l[0], l[1]}
		if j, dup := seenLink[k]; dup {
			return nil, tenants.Invalid(f, "repeats roles[%d]", j)
		}
		seenLink[k] = i
		links[l[0]] = append(links[l[0]], l[1])
	}
	if cycle := findCycle(links); cycle != nil {
		return nil, tenants.Invalid("roles", "the links form a cycle: %s", strings.Join(cycle, " → "))
	}

	m, err := model.NewModelFromString(modelText)
	if err != nil {
		return nil, fmt.Errorf("access rules: model: %w", err) // a bug: the model is ours
	}
	ce, err := casbin.NewEnforcer(m)
	if err != nil {
		return nil, fmt.Errorf("access rules: casbin: %w", err)
	}
	ce.EnableAutoSave(false)
	ce.AddFunction("subjectMatch", subjectMatch)
	ce.AddFunction("pathMatch", e.pathMatch)
	ce.AddFunction("actionMatch", e.actionMatch)
	if len(norm) > 0 {
		if _, err := ce.AddPolicies(norm); err != nil {
			return nil, fmt.Errorf("access rules: casbin rules: %w", err)
		}
	}
	if len(roles) > 0 {
		if _, err := ce.AddGroupingPolicies(roles); err != nil {
			return nil, fmt.Errorf("access rules: casbin roles: %w", err)
		}
	}
	// The role closure each member reaches, from Casbin's role manager, so a request's
	// subjects expand once instead of once per rule.
	depth := make(map[string]int, len(links))
	for member := range links {
		if d := depthOf(links, member, depth); d > MaxRoleDepth {
			return nil, tenants.Invalid("roles", "%q inherits roles %d levels deep, at most %d", member, d, MaxRoleDepth)
		}
	}
	e.closure = make(map[string][]string, len(links))
	for member := range links {
		implied, err := ce.GetImplicitRolesForUser(member)
		if err != nil {
			return nil, tenants.Invalid("roles", "%v", err)
		}
		e.closure[member] = implied
	}
	e.casbin = ce
	return e, nil
}

// checkSubject accepts a consumer id or name, or a role: 1–256 bytes of printable
// UTF-8 without leading or trailing spaces. AnySubject only in rules.
func checkSubject(s string, rule bool) error {
	switch {
	case s == "":
		return fmt.Errorf("is required")
	case len(s) > MaxSubjectLen:
		return fmt.Errorf("must be at most %d bytes", MaxSubjectLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("must not start or end with spaces")
	case s == AnySubject && !rule:
		return fmt.Errorf("%q (any caller) may be a rule's subject, not a member or role", AnySubject)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must not contain control characters")
		}
	}
	return nil
}

// parseAction reads "*", "GET" or "GET|POST".
func parseAction(s string) (*action, error) {
	if s == "*" {
		return &action{any: true}, nil
	}
	if s == "" {
		return nil, fmt.Errorf("is required: a method (GET), a list (GET|POST) or * for any")
	}
	a := &action{}
	for _, m := range strings.Split(s, "|") {
		switch {
		case m == "*":
			return nil, fmt.Errorf("* means every method and cannot be part of a list")
		case slices.Contains(methods, m):
		case slices.Contains(methods, strings.ToUpper(m)):
			return nil, fmt.Errorf("methods are upper case: write %s", strings.ToUpper(m))
		default:
			return nil, fmt.Errorf("%q is not a method (%s, or * for any)", m, strings.Join(methods, ", "))
		}
		if slices.Contains(a.methods, m) {
			return nil, fmt.Errorf("%s is listed twice", m)
		}
		a.methods = append(a.methods, m)
	}
	return a, nil
}

// findCycle returns a cycle of role links, or nil.
func findCycle(links map[string][]string) []string {
	const (
		unseen = iota
		active
		done
	)
	state := make(map[string]int)
	var stack []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = active
		stack = append(stack, n)
		for _, m := range links[n] {
			switch state[m] {
			case active:
				i := slices.Index(stack, m)
				return append(append([]string(nil), stack[i:]...), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	keys := make([]string, 0, len(links))
	for k := range links {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the reported cycle does not depend on map order
	for _, k := range keys {
		if state[k] == unseen {
			if c := visit(k); c != nil {
				return c
			}
		}
	}
	return nil
}

// depthOf is the longest chain of links from n (the graph has no cycle), memoized in
// memo so a graph of shared roles costs linear time.
func depthOf(links map[string][]string, n string, memo map[string]int) int {
	if d, ok := memo[n]; ok {
		return d
	}
	d := 0
	for _, m := range links[n] {
		d = max(d, 1+depthOf(links, m, memo))
	}
	memo[n] = d
	return d
}

// Rules is the number of rules compiled.
func (e *Enforcer) Rules() int { return e.rules }

// Allow reports whether a caller known as subjects (its consumer id and/or name, and its
// roles; empty strings are ignored) may make a request with method to path, the edge's
// normalized request path. It is false when no subject is given, when the path is not in
// normal form or has ";", when no allow rule matches, and when any deny rule matches.
func (e *Enforcer) Allow(subjects []string, method, path []byte) bool {
	var buf [256]byte
	key, ok := appendKey(buf[:0], subjects, method, path)
	if ok {
		if d, hit := e.cache.get(key); hit {
			return d
		}
	}
	d := e.decide(subjects, method, path, true)
	if ok {
		e.cache.put(key, d)
	}
	return d
}

// decide answers a request the per-request cache does not know. The answer depends on
// the path only through which patterns it matches (strictly and loosely), so it first
// computes those match bits — one cheap pass over the patterns — and looks the request's
// class (subjects, method, bits) up in a second cache; only a new class runs Casbin.
// Requests to /orders/1, /orders/2, … are one class: made-up ids cannot make every
// request pay for a full evaluation of the rules.
func (e *Enforcer) decide(subjects []string, method, path []byte, useClasses bool) bool {
	if e.rules == 0 || !normalPath(path) || len(method) == 0 {
		return false
	}
	var bitsBuf [64]byte
	bits := e.matchBits(bitsBuf[:0], path)
	if !useClasses {
		return e.enforce(subjects, method, bits)
	}
	var keyBuf [256]byte
	key, ok := appendKey(keyBuf[:0], subjects, method, bits)
	if ok {
		if d, hit := e.classes.get(key); hit {
			return d
		}
	}
	d := e.enforce(subjects, method, bits)
	if ok {
		e.classes.put(key, d)
	}
	return d
}

// matchBits appends two bits per pattern: bit 2i is whether path matches pattern i
// strictly (allow rules), bit 2i+1 whether it matches loosely (deny rules).
func (e *Enforcer) matchBits(dst, path []byte) []byte {
	var looseBuf, toggledBuf [256]byte
	loose := looseBytes(looseBuf[:0], path)
	toggled := toggleSlash(toggledBuf[:0], loose)
	n := (2*len(e.patterns) + 7) / 8
	for i := 0; i < n; i++ {
		dst = append(dst, 0)
	}
	for i, p := range e.patterns {
		if p.inAllow && p.matchStrict(path) {
			dst[2*i/8] |= 1 << (2 * i % 8)
		}
		if p.inDeny && p.matchLoose(loose, toggled) {
			dst[(2*i+1)/8] |= 1 << ((2*i + 1) % 8)
		}
	}
	return dst
}

// enforce runs Casbin on a request class.
func (e *Enforcer) enforce(subjects []string, method, bits []byte) bool {
	set := e.expand(subjects)
	if len(set.names) == 0 {
		return false
	}
	req := &pathRequest{bits: append([]byte(nil), bits...)}
	ok, err := e.casbin.Enforce(set, req, &methodRequest{method: string(method)})
	return err == nil && ok
}

// subjectSet is a request's subjects with the roles they imply.
type subjectSet struct{ names []string }

func (e *Enforcer) expand(subjects []string) *subjectSet {
	set := &subjectSet{}
	add := func(s string) {
		if s != "" && !slices.Contains(set.names, s) {
			set.names = append(set.names, s)
		}
	}
	for _, s := range subjects {
		add(s)
		for _, r := range e.closure[s] {
			add(r)
		}
	}
	return set
}

// pathRequest carries the request path's match bits (see matchBits).
type pathRequest struct{ bits []byte }

func (r *pathRequest) match(i int, loose bool) bool {
	b := 2 * i
	if loose {
		b++
	}
	return r.bits[b/8]&(1<<(b%8)) != 0
}

type methodRequest struct{ method string }

// The matcher functions Casbin calls, once per rule.

func subjectMatch(args ...any) (any, error) {
	set, ok1 := args[0].(*subjectSet)
	sub, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		return false, nil
	}
	if sub == AnySubject {
		return len(set.names) > 0, nil
	}
	return slices.Contains(set.names, sub), nil
}

func (e *Enforcer) pathMatch(args ...any) (any, error) {
	req, ok1 := args[0].(*pathRequest)
	pat, ok2 := args[1].(string)
	eft, ok3 := args[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return false, nil
	}
	i, ok := e.byPat[pat]
	if !ok {
		return false, nil
	}
	return req.match(i, eft == EffectDeny), nil
}

func (e *Enforcer) actionMatch(args ...any) (any, error) {
	req, ok1 := args[0].(*methodRequest)
	src, ok2 := args[1].(string)
	eft, ok3 := args[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return false, nil
	}
	a := e.actions[src]
	if a == nil {
		return false, nil
	}
	if a.any {
		return true, nil
	}
	m := req.method
	if eft != EffectDeny {
		return slices.Contains(a.methods, m), nil
	}
	// Deny: any letter case, and a denied GET denies HEAD (servers answer HEAD with
	// their GET handler).
	for _, x := range a.methods {
		if strings.EqualFold(x, m) || x == "GET" && strings.EqualFold(m, "HEAD") {
			return true, nil
		}
	}
	return false, nil
}
