package tenants

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"tollgate/infra/netaddr"
)

// UpstreamAddressRule is the operator's say on where upstreams may point. The zero value
// refuses every address that is not globally reachable (specialRanges).
type UpstreamAddressRule struct {
	// AllowCIDRs re-admits ranges that are refused by default (TOLLGATE_UPSTREAM_ALLOW_CIDRS).
	AllowCIDRs []netip.Prefix
	// GatewayPorts are the ports Tollgate itself listens on; a target on a local or
	// allowed address with one of them would loop back into the gateway.
	GatewayPorts []int
	// EdgeDomain: a target under it would route back into the edge.
	EdgeDomain string
}

func (p *UpstreamAddressRule) allowed(a netip.Addr) bool {
	for _, c := range p.AllowCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// CheckAddr says why the edge must not connect to a, or nil. The edge calls it at dial
// time on every resolved address, so a name that resolves somewhere refused is refused
// too. An address is judged by the most specific entry of specialRanges containing it;
// an IPv6 form that embeds an IPv4 address (mapped, NAT64, 6to4, an ISATAP interface
// id…) is judged by that IPv4 address. AllowCIDRs re-admits a refused address it names
// (or whose embedded IPv4 address it names), never an unspecified, broadcast or
// multicast one. It allocates nothing for an address it allows.
func (p *UpstreamAddressRule) CheckAddr(a netip.Addr, port int) error {
	if !a.IsValid() {
		return fmt.Errorf("is not an IP address")
	}
	// A zone only picks the interface; netip.Prefix.Contains would match nothing.
	a = a.WithZone("")
	r := specialRangeOf(a)
	if r == nil {
		return nil
	}
	switch r.kind {
	case rangeGlobal:
		if a.Is6() {
			if e, ok := isatapIPv4(a); ok {
				if er := refusedIPv4(e); er != nil && (er.kind == rangeNever || !p.allowed(a) && !p.allowed(e)) {
					return fmt.Errorf("%s has an ISATAP interface id (RFC 5214) that embeds %s: %w", a, e, er.refusal(e))
				}
			}
		}
		return nil
	case rangeEmbeds:
		e := embeddedIPv4(a, r.embedAt)
		er := refusedIPv4(e)
		if er == nil {
			return nil
		}
		if er.kind == rangeNever || !p.allowed(a) && !p.allowed(e) {
			return fmt.Errorf("%s is %s (%s) and embeds %s: %w", a, r.name, r.rfc, e, er.refusal(e))
		}
	case rangeNever:
		return r.refusal(a)
	default:
		if !p.allowed(a) {
			return r.refusal(a)
		}
	}
	// Re-admitted by the operator: a local address may still be the gateway itself.
	for _, gp := range p.GatewayPorts {
		if port == gp {
			return fmt.Errorf("%s:%d is one of the gateway's own ports", a, port)
		}
	}
	return nil
}

// ValidateTarget checks one upstream URL at save time and returns it normalized.
func (p *UpstreamAddressRule) ValidateTarget(raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("is required")
	}
	if len(raw) > 2048 {
		return "", fmt.Errorf("is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("must be an http:// or https:// URL")
	}
	if u.User != nil {
		return "", fmt.Errorf("must not carry credentials")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("must not have a query or fragment")
	}
	if u.Opaque != "" || u.Host == "" {
		return "", fmt.Errorf("must name a host")
	}
	host := u.Hostname()
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("has an invalid port %q", ps)
		}
		port = n
	}
	if u.Path != "" && !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("path must start with /")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("must not use an IPv6 zone")
		}
		if err := p.CheckAddr(a, port); err != nil {
			return "", err
		}
	} else {
		h := strings.ToLower(strings.TrimSuffix(host, "."))
		if !validHostname(h) {
			return "", fmt.Errorf("host %q is not a valid host name", host)
		}
		if numericLabel(h[strings.LastIndexByte(h, '.')+1:]) {
			// The C resolver reads 127.1, 2130706433 and 0x7f.1 as IPv4 addresses; no top
			// level domain looks like that. The edge would judge the address at dial time;
			// saying so now is clearer.
			return "", fmt.Errorf("host %q is an IPv4 address in a shorthand form: write it as four decimal numbers (a.b.c.d)", host)
		}
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			// Names that resolve to loopback by definition (RFC 6761): judge them as 127.0.0.1.
			if err := p.CheckAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port); err != nil {
				return "", fmt.Errorf("host %s is loopback: %v", host, err)
			}
		}
		if d := strings.ToLower(p.EdgeDomain); d != "" && (h == d || strings.HasSuffix(h, "."+d)) {
			for _, gp := range p.GatewayPorts {
				if port == gp {
					return "", fmt.Errorf("host %s:%d is the gateway's own edge", host, port)
				}
			}
		}
	}
	u.Host = strings.ToLower(u.Host)
	return strings.TrimSuffix(u.String(), "/"), nil
}

// numericLabel reports a label of decimal digits, or 0x and hex digits.
func numericLabel(l string) bool {
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		l = rest
		return l == "" || strings.Trim(l, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

func validHostname(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// ValidateSlug applies DNS label rules: 1–63 of a–z, 0–9 and '-', not starting or ending
// with '-', and refuses the names the service itself uses under the edge domain. Slugs are
// the first label of the tenant's edge host name.
func ValidateSlug(s string) error { return netaddr.CheckLabel(s) }

// ValidateName checks a human-readable name: 1–100 characters, printable, trimmed.
func ValidateName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("is required")
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8")
	case utf8.RuneCountInString(s) > 100:
		return fmt.Errorf("must be at most 100 characters")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("must not start or end with spaces")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must not contain control characters")
		}
	}
	return nil
}

// ValidateFunctionName checks a function's name. Stricter than ValidateName because it
// is a segment of the function's URL and of the console's links: the plan name rules.
func ValidateFunctionName(s string) error { return ValidatePlanName(s) }

// ValidDigest reports whether s is a hex SHA-256 digest, 64 lowercase hex digits.
func ValidDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func validateFunctionRefs(fs []FunctionRef, auth string) error {
	if len(fs) > MaxRouteFunctions {
		return Invalid("functions", "may name at most %d functions, got %d", MaxRouteFunctions, len(fs))
	}
	if auth == AuthFunction && len(fs) == 0 {
		return Invalid("functions", "auth function needs at least one function: the first one authenticates")
	}
	for i := range fs {
		f := &fs[i]
		if err := ValidateFunctionName(f.Name); err != nil {
			return Invalid(fmt.Sprintf("functions[%d].name", i), "%v", err)
		}
		if len(f.Config) > MaxFunctionConfigBytes {
			return Invalid(fmt.Sprintf("functions[%d].config", i), "must be at most %d bytes, got %d", MaxFunctionConfigBytes, len(f.Config))
		}
		if f.SHA256 != "" {
			f.SHA256 = strings.ToLower(f.SHA256)
			if !ValidDigest(f.SHA256) {
				return Invalid(fmt.Sprintf("functions[%d].sha256", i), "must be 64 hex digits (the module's sha256)")
			}
		}
	}
	return nil
}

// ValidatePlanName checks a plan reference: the slug rules, without the reserved list.
func ValidatePlanName(s string) error {
	if s == "" {
		return fmt.Errorf("is required")
	}
	if len(s) > 63 {
		return fmt.Errorf("must be at most 63 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("may contain only lowercase letters, digits, '-' and '_'")
		}
	}
	return nil
}

// Methods the edge routes.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "OPTIONS": true, "CONNECT": false, "TRACE": false,
}

// ValidatePath checks one route path: "/a/b" (prefix) or "=/a/b" (exact), whose segments
// may be parameters, "{name}", each matching any one non-empty segment of a request path.
// Paths are compared with the normalized request path, so they must themselves be normal:
// no empty, "." or ".." segments, no percent-encoding, no query, nothing outside RFC 3986
// pchar but a parameter's braces.
func ValidatePath(p string) error {
	raw := strings.TrimPrefix(p, "=")
	switch {
	case raw == "":
		return fmt.Errorf("is required")
	case len(raw) > 1024:
		return fmt.Errorf("must be at most 1024 characters")
	case raw[0] != '/':
		return fmt.Errorf("must start with / (or =/ for an exact match)")
	}
	if raw == "/" {
		return nil
	}
	segs := strings.Split(strings.TrimSuffix(raw[1:], "/"), "/")
	var params []string
	for _, seg := range segs {
		switch seg {
		case "":
			return fmt.Errorf("must not contain empty segments (//)")
		case ".", "..":
			return fmt.Errorf("must not contain . or .. segments")
		}
		if name, ok := pathParam(seg); ok {
			if err := validParamName(name); err != nil {
				return fmt.Errorf("parameter %s: %v", seg, err)
			}
			if slices.Contains(params, name) {
				return fmt.Errorf("names parameter %s twice", seg)
			}
			params = append(params, name)
			continue
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
				strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
			if !ok {
				switch c {
				case '%':
					return fmt.Errorf("must not be percent-encoded: write the decoded character")
				case '{', '}':
					return fmt.Errorf("segment %q: a parameter is a whole segment, as in /users/{id}", seg)
				}
				return fmt.Errorf("contains %q, which a path may not contain", rune(c))
			}
		}
	}
	return nil
}

// MaxParamName is the longest name a path parameter may have.
const MaxParamName = 64

// pathParam is the name of a "{name}" segment; ok is false for any other segment.
func pathParam(seg string) (name string, ok bool) {
	if len(seg) < 2 || seg[0] != '{' || seg[len(seg)-1] != '}' {
		return "", false
	}
	return seg[1 : len(seg)-1], true
}

func validParamName(name string) error {
	if name == "" || len(name) > MaxParamName {
		return fmt.Errorf("needs a name of 1 to %d characters", MaxParamName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("a name may contain only letters, digits and '_'")
		}
	}
	return nil
}

// PathPattern is a valid route path with its parameters' names left out ("/users/{id}" is
// "/users/{}"): two paths with the same pattern match the same requests, so they are one
// path to the route table and to uniqueness checks.
func PathPattern(p string) string {
	if !strings.Contains(p, "{") {
		return p
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if _, ok := pathParam(seg); ok {
			segs[i] = "{}"
		}
	}
	return strings.Join(segs, "/")
}

// ValidateRateLimit checks a limit's rate and burst and defaults Burst to the rate.
// Exactly one of RPS and RPM is set. Per and Mode are judged by the route or plan.
func ValidateRateLimit(field string, rl *RateLimit) error {
	if rl == nil {
		return nil
	}
	rate := rl.RPS
	switch {
	case rl.RPS != 0 && rl.RPM != 0:
		return Invalid(field+".rpm", "cannot be set together with rps: give the rate per second (rps) or per minute (rpm), not both")
	case rl.RPM != 0:
		if rl.RPM < 1 || rl.RPM > MaxRate {
			return Invalid(field+".rpm", "must be between 1 and %d, got %d", MaxRate, rl.RPM)
		}
		rate = rl.RPM
	case rl.RPS < 1 || rl.RPS > MaxRate:
		return Invalid(field+".rps", "must be between 1 and %d (or set rpm, requests per minute, instead), got %d", MaxRate, rl.RPS)
	}
	if rl.Burst == 0 {
		rl.Burst = rate
	}
	if rl.Burst < 1 || rl.Burst > MaxRate {
		return Invalid(field+".burst", "must be between 1 and %d, got %d", MaxRate, rl.Burst)
	}
	return nil
}

// MinApproximateBurst is the smallest burst ModeApproximate accepts for rl's rate:
// rate × 0.1 s + 1, rounded up. Approximate counting charges a batch of admissions at
// its sync (every 100 ms), so a smaller bucket would refuse steady traffic below the rate.
func MinApproximateBurst(rl *RateLimit) int {
	if rl.RPM > 0 {
		return (rl.RPM+599)/600 + 1
	}
	return (rl.RPS+9)/10 + 1
}

// validateMode checks a limit's mode and fills the default: def, except that a default
// of ModeApproximate becomes ModeExact when rl's burst is below MinApproximateBurst.
func validateMode(field string, mode *string, rl *RateLimit, rateField, def string) error {
	tooSmall := rl != nil && rl.Burst < MinApproximateBurst(rl)
	switch *mode {
	case "":
		*mode = def
		if def == ModeApproximate && tooSmall {
			*mode = ModeExact
		}
	case ModeLocal, ModeExact:
	case ModeApproximate:
		if tooSmall {
			return Invalid(rateField+".burst", "must be at least %d for mode approximate, got %d: the rate × 0.1 s + 1, or approximate counting refuses steady traffic below the rate; raise the burst or use mode exact",
				MinApproximateBurst(rl), rl.Burst)
		}
	default:
		return Invalid(field, "must be one of local, exact, approximate; got %q", *mode)
	}
	return nil
}

// validateLimits checks the limits of a plan (a tenant's or a platform plan) and fills
// their defaults.
func validateLimits(rl *RateLimit, q *Quota, concurrency int, mode *string) error {
	if err := ValidateRateLimit("rate_limit", rl); err != nil {
		return err
	}
	if rl != nil && rl.Per != "" {
		return Invalid("rate_limit.per", "is a route setting: a plan's rate applies to each consumer on it (a platform plan's to the whole tenant)")
	}
	if rl != nil && rl.Mode != "" {
		return Invalid("rate_limit.mode", "is a route setting: a plan has one mode, set \"mode\" on the plan")
	}
	if q != nil && (q.Requests < 1 || q.Requests > MaxQuota) {
		return Invalid("quota.requests", "must be between 1 and %d", MaxQuota)
	}
	if concurrency < 0 || concurrency > MaxRate {
		return Invalid("concurrency", "must be between 0 (no cap) and %d", MaxRate)
	}
	return validateMode("mode", mode, rl, "rate_limit", ModeApproximate)
}

// validateRouteLimit checks a route's rate_limit (with the route's auth already
// defaulted) and fills Per and Mode.
func validateRouteLimit(rl *RateLimit, auth string) error {
	if rl == nil {
		return nil
	}
	if err := ValidateRateLimit("rate_limit", rl); err != nil {
		return err
	}
	switch rl.Per {
	case "":
		rl.Per = PerRoute
	case PerRoute, PerIP:
	case PerConsumer:
		if auth == AuthNone {
			return Invalid("rate_limit.per", "%q needs an authenticated route (auth key, jwt or key_or_jwt); this route has auth none", PerConsumer)
		}
	default:
		return Invalid("rate_limit.per", "must be one of route, ip, consumer; got %q", rl.Per)
	}
	def := ModeApproximate
	if rl.Per == PerIP {
		// Client addresses are many and short-lived: counting them in Redis would cost a
		// synced entry per address for little gain.
		def = ModeLocal
	}
	return validateMode("rate_limit.mode", &rl.Mode, rl, "rate_limit", def)
}

// Validate checks t and fills defaults. PlatformPlan defaults to "free".
func (t *Tenant) Validate() error {
	if err := ValidateSlug(t.Slug); err != nil {
		return Invalid("slug", "%v", err)
	}
	if t.Name == "" {
		t.Name = t.Slug
	}
	if err := ValidateName(t.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if t.PlatformPlan == "" {
		t.PlatformPlan = "free"
	}
	if err := ValidatePlanName(t.PlatformPlan); err != nil {
		return Invalid("plan", "%v", err)
	}
	if t.Limits != nil {
		if err := t.Limits.Validate(); err != nil {
			if e, ok := err.(*Error); ok && e.Field != "" {
				e.Field = "limits." + e.Field
			}
			return err
		}
	}
	return nil
}

// Validate checks r against the rules and the operator's upstream policy, and normalizes
// it: methods upper-cased and sorted by first appearance, weights defaulted to 1, auth to
// "none", sizes and timeouts to their defaults, target URLs lower-cased hosts.
func (r *Route) Validate(p *UpstreamAddressRule) error {
	if err := ValidateName(r.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if len(r.Paths) == 0 {
		return Invalid("paths", "needs at least one path")
	}
	if len(r.Paths) > MaxPaths {
		return Invalid("paths", "may have at most %d paths, got %d", MaxPaths, len(r.Paths))
	}
	seen := make(map[string]int, len(r.Paths))
	for i, path := range r.Paths {
		if err := ValidatePath(path); err != nil {
			return Invalid(fmt.Sprintf("paths[%d]", i), "%v", err)
		}
		pattern := PathPattern(path)
		if j, ok := seen[pattern]; ok {
			if r.Paths[j] == path {
				return Invalid(fmt.Sprintf("paths[%d]", i), "%s is listed twice", path)
			}
			return Invalid(fmt.Sprintf("paths[%d]", i), "%s is %s with other parameter names", path, r.Paths[j])
		}
		seen[pattern] = i
	}
	if len(r.Methods) > len(knownMethods) {
		return Invalid("methods", "lists too many methods")
	}
	seenM := make(map[string]bool, len(r.Methods))
	for i, m := range r.Methods {
		u := strings.ToUpper(m)
		if !knownMethods[u] {
			return Invalid(fmt.Sprintf("methods[%d]", i), "%q is not a method routes may use (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)", m)
		}
		if seenM[u] {
			return Invalid(fmt.Sprintf("methods[%d]", i), "%s is listed twice", u)
		}
		seenM[u] = true
		r.Methods[i] = u
	}
	if r.Methods == nil {
		r.Methods = []string{}
	}
	if err := validateTargets(&r.Upstream, "upstream", p); err != nil {
		return err
	}
	if err := r.Upstream.validate("upstream"); err != nil {
		return err
	}
	switch r.Auth {
	case "":
		r.Auth = AuthNone
	case AuthNone, AuthKey, AuthJWT, AuthKeyOrJWT, AuthFunction, AuthExternal:
	default:
		return Invalid("auth", "must be one of none, key, jwt, key_or_jwt, function, external; got %q", r.Auth)
	}
	if err := r.ExternalAuth.Validate(p, r.Auth); err != nil {
		return err
	}
	if err := validateFunctionRefs(r.Functions, r.Auth); err != nil {
		return err
	}
	if err := validateRouteLimit(r.RateLimit, r.Auth); err != nil {
		return err
	}
	switch {
	case r.MaxBodyBytes == 0:
		r.MaxBodyBytes = DefaultMaxBodyBytes
	case r.MaxBodyBytes < 0 || r.MaxBodyBytes > MaxMaxBodyBytes:
		return Invalid("max_body_bytes", "must be between 1 and %d", MaxMaxBodyBytes)
	}
	if r.ConnectTimeoutMS == 0 {
		r.ConnectTimeoutMS = DefaultConnectTimeoutMS
	}
	if r.ConnectTimeoutMS < 1 || r.ConnectTimeoutMS > MaxTimeoutMS {
		return Invalid("connect_timeout_ms", "must be between 1 and %d", MaxTimeoutMS)
	}
	if r.TimeoutMS == 0 {
		r.TimeoutMS = DefaultTimeoutMS
	}
	if r.TimeoutMS < 1 || r.TimeoutMS > MaxTimeoutMS {
		return Invalid("timeout_ms", "must be between 1 and %d", MaxTimeoutMS)
	}
	if err := r.Transform.Validate(); err != nil {
		return err
	}
	if err := r.Canary.Validate(p, r.Auth); err != nil {
		return err
	}
	if err := r.CORS.Validate(); err != nil {
		return err
	}
	return r.Cache.Validate()
}

// Validate checks c.
func (c *Consumer) Validate() error {
	if err := ValidateName(c.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if c.Plan != "" {
		if err := ValidatePlanName(c.Plan); err != nil {
			return Invalid("plan", "%v", err)
		}
	}
	return nil
}

// Validate checks p.
func (p *ConsumerPlan) Validate() error {
	if err := ValidatePlanName(p.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	return validateLimits(p.RateLimit, p.Quota, p.Concurrency, &p.Mode)
}

// RoleAdmin is the default role of a token; TokenRoles (people.go) lists the others.
const (
	RoleAdmin = "admin"
)

// Validate checks t.
func (t *Token) Validate() error {
	if err := ValidateName(t.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if t.Role == "" {
		t.Role = RoleAdmin
	}
	if t.Role != RoleAdmin && t.Role != RoleDeveloper && t.Role != RoleViewer {
		return Invalid("role", "must be one of admin, developer, viewer")
	}
	return nil
}

// SplitHostPort is net.SplitHostPort that tolerates a missing port.
func SplitHostPort(hostport string) (string, string) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, ""
	}
	return h, p
}
