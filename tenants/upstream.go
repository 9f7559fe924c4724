package tenants

import (
	"fmt"
	"strings"
)

// Load-balancing methods of an upstream.
const (
	BalanceRoundRobin = "round_robin" // smooth weighted round-robin (the default)
	BalanceLeastConn  = "least_conn"  // fewest requests in flight, relative to weight
	BalanceHash       = "hash"        // consistent hash on HashOn
)

// What a hash (Upstream.HashOn, Canary.StickyOn) is computed from. A header is named
// "header:<Name>".
const (
	HashOnConsumer = "consumer" // the authenticated consumer (the client address when anonymous)
	HashOnIP       = "ip"       // the client address
	HashOnHeader   = "header:"  // prefix: the value of a request header
)

// Bounds and defaults of the resilience settings.
const (
	DefaultHealthPath          = "/"
	DefaultHealthIntervalMS    = 5_000
	MinHealthIntervalMS        = 100
	DefaultHealthTimeoutMS     = 1_000
	DefaultHealthyThreshold    = 2
	DefaultUnhealthyThreshold  = 3
	MaxHealthThreshold         = 100
	DefaultPassiveFailures     = 5
	DefaultEjectMS             = 30_000
	DefaultBreakerErrorPercent = 50
	DefaultBreakerMinRequests  = 20
	DefaultBreakerWindowMS     = 10_000
	DefaultBreakerOpenMS       = 30_000
	DefaultRetryAttempts       = 1
	MaxRetryAttempts           = 5
	DefaultRetryBudgetPercent  = 20
	DefaultRetryMinPerSecond   = 3
	MaxCanaryMatchValues       = 32
)

// HealthCheck is an active health check: every IntervalMS the edge sends GET Path to
// each target; a target with UnhealthyThreshold failures in a row (no answer within
// TimeoutMS, or a status outside 200–399) is taken out of rotation, and put back after
// HealthyThreshold successes in a row. Each edge checks on its own.
type HealthCheck struct {
	Path               string `json:"path"`
	IntervalMS         int    `json:"interval_ms"`
	TimeoutMS          int    `json:"timeout_ms"`
	HealthyThreshold   int    `json:"healthy_threshold"`
	UnhealthyThreshold int    `json:"unhealthy_threshold"`
}

// PassiveHealth is outlier ejection from live traffic: a target whose answers fail
// Failures times in a row (connect error, timeout, 502, 503 or 504) is ejected for
// EjectMS; with an active HealthCheck it comes back as soon as the check passes
// HealthyThreshold times instead.
type PassiveHealth struct {
	Failures int `json:"failures"`
	EjectMS  int `json:"eject_ms"`
}

// CircuitBreaker opens a target's circuit when, within the last WindowMS, at least
// MinRequests requests were sent to it and ErrorPercent of them or more failed (as
// PassiveHealth counts failures). An open circuit takes the target out of rotation for
// OpenMS; then one trial request is let through (half-open): success closes the circuit,
// failure opens it again.
type CircuitBreaker struct {
	ErrorPercent int `json:"error_percent"`
	MinRequests  int `json:"min_requests"`
	WindowMS     int `json:"window_ms"`
	OpenMS       int `json:"open_ms"`
}

// Retries sends a failed request again to another target, at most Attempts more times.
// A request that reached an upstream (a timeout, a reset, or a 502/503/504 answer) is
// retried only when its method is idempotent (GET, HEAD, OPTIONS, PUT, DELETE); one that
// never got a connection is retried whatever its method. Retries are budgeted: over
// the last 10 seconds they may add at most BudgetPercent to the route's requests, plus
// MinPerSecond, so a failing upstream is not hit by a retry storm. Requests whose body
// is streamed (larger than the edge buffers) are not retried.
type Retries struct {
	Attempts      int `json:"attempts"`
	BudgetPercent int `json:"budget_percent"`
	MinPerSecond  int `json:"min_per_second"`
}

// Canary sends part of a route's traffic to another set of targets: requests matching
// Match always, others by Weight percent. The weighted split is exact (a fixed
// schedule) unless Sticky, where a hash of StickyOn decides, so each consumer (or client,
// or header value) stays on one side.
type Canary struct {
	Upstream Upstream     `json:"upstream"`
	Weight   int          `json:"weight"`
	Match    *CanaryMatch `json:"match,omitempty"`
	Sticky   bool         `json:"sticky"`
	StickyOn string       `json:"sticky_on,omitempty"`
}

// CanaryMatch selects requests for the canary by a request header or, on JWT routes, a
// claim of the verified token (exactly one of the two): the canary gets the request when
// the value is one of Values (any value at all when Values is empty).
type CanaryMatch struct {
	Header string   `json:"header,omitempty"`
	Claim  string   `json:"claim,omitempty"`
	Values []string `json:"values,omitempty"`
}

// validate checks and normalizes u's balancing and resilience settings (Route.Validate
// checks the targets); at is the field path of u ("upstream", "canary.upstream").
func (u *Upstream) validate(at string) error {
	switch u.Protocol {
	case ProtocolHTTP1:
		u.Protocol = "" // the default is stored as omitted, so a round trip keeps documents equal
	case "", ProtocolH2:
	default:
		return Invalid(at+".protocol", "must be http1 or h2; got %q", u.Protocol)
	}
	switch u.Balance {
	case "":
		u.Balance = BalanceRoundRobin
	case BalanceRoundRobin, BalanceLeastConn:
	case BalanceHash:
		if u.HashOn == "" {
			u.HashOn = HashOnConsumer
		}
	default:
		return Invalid(at+".balance", "must be one of round_robin, least_conn, hash; got %q", u.Balance)
	}
	if u.HashOn != "" {
		if u.Balance != BalanceHash {
			return Invalid(at+".hash_on", "applies only with balance hash")
		}
		if err := validateHashOn(u.HashOn); err != nil {
			return Invalid(at+".hash_on", "%v", err)
		}
	}
	if h := u.HealthCheck; h != nil {
		if h.Path == "" {
			h.Path = DefaultHealthPath
		}
		if err := ValidatePath(h.Path); err != nil || strings.HasPrefix(h.Path, "=") {
			return Invalid(at+".health_check.path", "must be a path starting with /")
		}
		if err := defaultInRange(&h.IntervalMS, DefaultHealthIntervalMS, MinHealthIntervalMS, MaxTimeoutMS); err != nil {
			return Invalid(at+".health_check.interval_ms", "%v", err)
		}
		if err := defaultInRange(&h.TimeoutMS, DefaultHealthTimeoutMS, 1, MaxTimeoutMS); err != nil {
			return Invalid(at+".health_check.timeout_ms", "%v", err)
		}
		if err := defaultInRange(&h.HealthyThreshold, DefaultHealthyThreshold, 1, MaxHealthThreshold); err != nil {
			return Invalid(at+".health_check.healthy_threshold", "%v", err)
		}
		if err := defaultInRange(&h.UnhealthyThreshold, DefaultUnhealthyThreshold, 1, MaxHealthThreshold); err != nil {
			return Invalid(at+".health_check.unhealthy_threshold", "%v", err)
		}
	}
	if p := u.Passive; p != nil {
		if err := defaultInRange(&p.Failures, DefaultPassiveFailures, 1, MaxHealthThreshold); err != nil {
			return Invalid(at+".passive_health.failures", "%v", err)
		}
		if err := defaultInRange(&p.EjectMS, DefaultEjectMS, 1, MaxTimeoutMS); err != nil {
			return Invalid(at+".passive_health.eject_ms", "%v", err)
		}
	}
	if b := u.CircuitBreaker; b != nil {
		if err := defaultInRange(&b.ErrorPercent, DefaultBreakerErrorPercent, 1, 100); err != nil {
			return Invalid(at+".circuit_breaker.error_percent", "%v", err)
		}
		if err := defaultInRange(&b.MinRequests, DefaultBreakerMinRequests, 1, 1_000_000); err != nil {
			return Invalid(at+".circuit_breaker.min_requests", "%v", err)
		}
		if err := defaultInRange(&b.WindowMS, DefaultBreakerWindowMS, 100, MaxTimeoutMS); err != nil {
			return Invalid(at+".circuit_breaker.window_ms", "%v", err)
		}
		if err := defaultInRange(&b.OpenMS, DefaultBreakerOpenMS, 1, MaxTimeoutMS); err != nil {
			return Invalid(at+".circuit_breaker.open_ms", "%v", err)
		}
	}
	if r := u.Retries; r != nil {
		if err := defaultInRange(&r.Attempts, DefaultRetryAttempts, 1, MaxRetryAttempts); err != nil {
			return Invalid(at+".retries.attempts", "%v", err)
		}
		if err := defaultInRange(&r.BudgetPercent, DefaultRetryBudgetPercent, 1, 100); err != nil {
			return Invalid(at+".retries.budget_percent", "%v", err)
		}
		if err := defaultInRange(&r.MinPerSecond, DefaultRetryMinPerSecond, 1, 1_000); err != nil {
			return Invalid(at+".retries.min_per_second", "%v", err)
		}
	}
	return nil
}

// defaultInRange sets *v to def when it is 0 and checks it is within [lo, hi].
func defaultInRange(v *int, def, lo, hi int) error {
	if *v == 0 {
		*v = def
	}
	if *v < lo || *v > hi {
		return fmt.Errorf("must be between %d and %d, got %d", lo, hi, *v)
	}
	return nil
}

// validateHashOn checks a hash source: consumer, ip or header:<Name>.
func validateHashOn(s string) error {
	switch s {
	case HashOnConsumer, HashOnIP:
		return nil
	}
	name, ok := strings.CutPrefix(s, HashOnHeader)
	if !ok {
		return fmt.Errorf("must be consumer, ip or header:<Name>; got %q", s)
	}
	return validateHeaderName(name)
}

// validateHeaderName checks a request header name is a non-empty token of at most
// MaxHeaderNameLen bytes, without '_' (requestHeaderName).
func validateHeaderName(n string) error {
	if n == "" || len(n) > MaxHeaderNameLen {
		return fmt.Errorf("header name must be 1–%d bytes", MaxHeaderNameLen)
	}
	for j := 0; j < len(n); j++ {
		if !isTokenChar(n[j]) {
			return fmt.Errorf("%q is not a valid header name (byte %d is not a token character)", n, j)
		}
	}
	return requestHeaderName(n)
}

// Validate checks c (the route's own targets are checked by Route.Validate; c's are
// checked here against the same policy).
func (c *Canary) Validate(p *UpstreamAddressRule, auth string) error {
	if c == nil {
		return nil
	}
	if err := validateTargets(&c.Upstream, "canary.upstream", p); err != nil {
		return err
	}
	if err := c.Upstream.validate("canary.upstream"); err != nil {
		return err
	}
	if c.Weight < 0 || c.Weight > 100 {
		return Invalid("canary.weight", "must be a percentage between 0 and 100, got %d", c.Weight)
	}
	if m := c.Match; m != nil {
		switch {
		case (m.Header == "") == (m.Claim == ""):
			return Invalid("canary.match", "needs exactly one of header and claim")
		case m.Header != "":
			if err := validateHeaderName(m.Header); err != nil {
				return Invalid("canary.match.header", "%v", err)
			}
		default:
			if auth != AuthJWT && auth != AuthKeyOrJWT {
				return Invalid("canary.match.claim", "needs a route with auth jwt or key_or_jwt")
			}
			if len(m.Claim) > 256 {
				return Invalid("canary.match.claim", "must be at most 256 bytes")
			}
		}
		if len(m.Values) > MaxCanaryMatchValues {
			return Invalid("canary.match.values", "may have at most %d values", MaxCanaryMatchValues)
		}
		for i, v := range m.Values {
			if len(v) > 1024 {
				return Invalid(fmt.Sprintf("canary.match.values[%d]", i), "must be at most 1024 bytes")
			}
		}
	}
	if c.StickyOn != "" && !c.Sticky {
		return Invalid("canary.sticky_on", "applies only with sticky true")
	}
	if c.Sticky {
		if c.StickyOn == "" {
			c.StickyOn = HashOnConsumer
		}
		if err := validateHashOn(c.StickyOn); err != nil {
			return Invalid("canary.sticky_on", "%v", err)
		}
	}
	return nil
}

// validateTargets checks and normalizes u's targets: 1–MaxTargets URLs the policy
// allows, weights 0–MaxWeight (all omitted: equal shares).
func validateTargets(u *Upstream, at string, p *UpstreamAddressRule) error {
	if len(u.Targets) == 0 {
		return Invalid(at+".targets", "needs at least one target")
	}
	if len(u.Targets) > MaxTargets {
		return Invalid(at+".targets", "may have at most %d targets", MaxTargets)
	}
	total := 0
	for i := range u.Targets {
		t := &u.Targets[i]
		v, err := p.ValidateTarget(t.URL)
		if err != nil {
			return Invalid(fmt.Sprintf("%s.targets[%d].url", at, i), "%v", err)
		}
		t.URL = v
		if t.Weight < 0 || t.Weight > MaxWeight {
			return Invalid(fmt.Sprintf("%s.targets[%d].weight", at, i), "must be between 0 and %d, got %d", MaxWeight, t.Weight)
		}
		total += t.Weight
	}
	if total == 0 {
		// Omitted weights mean equal shares.
		for i := range u.Targets {
			u.Targets[i].Weight = 1
		}
	}
	return nil
}
