package limit

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"tollgate/tenants"
)

// Mode says where a limit is counted. It is a plan setting.
type Mode uint8

const (
	// ModeLocal: each edge enforces its share of the limit (the limit ÷ live edges) in
	// process, with no Redis traffic per request. Accurate when the load balancer spreads
	// a key's traffic evenly over the edges. Without Redis there is one edge: the whole
	// limit.
	ModeLocal Mode = iota
	// ModeExact: one atomic check-and-commit in Redis per request (one EVALSHA for all of
	// the request's exact limits). The limit holds across any number of edges.
	ModeExact
	// ModeApproximate: admitted locally against the last shared state read from Redis;
	// local counts are pushed and the shared state read back every sync interval, one
	// pipelined round trip for all keys. See the package comment for the error bound.
	ModeApproximate
)

var modeNames = [...]string{ModeLocal: "local", ModeExact: "exact", ModeApproximate: "approximate"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode reads a plan's mode: "local", "exact" or "approximate"; "" is def.
func ParseMode(s string, def Mode) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return def, nil
	case "local":
		return ModeLocal, nil
	case "exact":
		return ModeExact, nil
	case "approximate", "approx":
		return ModeApproximate, nil
	}
	return def, fmt.Errorf("limit: mode must be local, exact or approximate, got %q", s)
}

type kind uint8

const (
	kindRate kind = iota + 1
	kindQuota
	kindConcurrency
)

// Rate is a token bucket: Limit requests per Per on average, bursts of up to Burst at
// once (GCRA). Burst 0 means Burst = Limit.
type Rate struct {
	Limit int64
	Per   time.Duration
	Burst int64
}

// RateOf converts the domain's limit: RPS per second, or RPM per minute.
func RateOf(rl *tenants.RateLimit) Rate {
	if rl.RPS == 0 && rl.RPM > 0 {
		return Rate{Limit: int64(rl.RPM), Per: time.Minute, Burst: int64(rl.Burst)}
	}
	return Rate{Limit: int64(rl.RPS), Per: time.Second, Burst: int64(rl.Burst)}
}

// Scope names one limit: the tenant it belongs to and the limit within the tenant.
// Limits with the same scope share their state, in process and in Redis, across config
// recompiles and edges, so a scope names what is limited, not a config version:
// "tenant" (the tenant's plan), "consumer" (each consumer's plan, keyed by consumer id),
// "route:<route id>" (a route's own limit), "route-ip:<route id>" (per client IP).
type Scope struct {
	Tenant string // tenant id: the Redis hash tag of all the tenant's keys
	Name   string
	Mode   Mode
}

// Rule is one compiled limit: a rate, a monthly quota or a concurrency cap, with its
// mode. Rules are built when config compiles and only read afterwards; any number of
// requests use one concurrently.
type Rule struct {
	kind   kind
	mode   Mode
	tenant string
	name   string
	id     uint64 // hash of kind, tenant and name: the in-process state key

	// rate
	rate     Rate
	interval int64 // emission interval T, ns
	tol      int64 // delay variation tolerance T·Burst, ns

	limit int64 // quota requests per month, or the concurrency cap

	keyBase string // Redis key after the limiter's prefix, before the request's key
	reason  string // Reason (reason.go)
}

// maxEdges bounds the divisor of local shares (and so keeps T·edges from overflowing).
const maxEdges = 1024

// NewRate compiles a rate limit.
func NewRate(s Scope, r Rate) (*Rule, error) {
	if r.Burst == 0 {
		r.Burst = r.Limit
	}
	if r.Limit < 1 || r.Burst < 1 {
		return nil, fmt.Errorf("limit: %s: rate and burst must be at least 1, got %d and %d", s.Name, r.Limit, r.Burst)
	}
	if r.Per < time.Millisecond || r.Per > 24*time.Hour {
		return nil, fmt.Errorf("limit: %s: period must be between 1ms and 24h, got %s", s.Name, r.Per)
	}
	t := int64(r.Per) / r.Limit
	if t < 1 {
		return nil, fmt.Errorf("limit: %s: %d per %s is finer than a nanosecond", s.Name, r.Limit, r.Per)
	}
	if r.Burst > (math.MaxInt64/4)/t/maxEdges-maxEdges {
		return nil, fmt.Errorf("limit: %s: burst %d of %d per %s is too large", s.Name, r.Burst, r.Limit, r.Per)
	}
	rule, err := newRule(kindRate, s)
	if err != nil {
		return nil, err
	}
	rule.rate, rule.interval, rule.tol = r, t, t*r.Burst
	rule.keyBase = "rl:{" + s.Tenant + "}:" + s.Name + ":"
	rule.reason = rule.describe()
	return rule, nil
}

// NewQuota compiles a quota of requests per calendar month (UTC).
func NewQuota(s Scope, requests int64) (*Rule, error) {
	if requests < 1 {
		return nil, fmt.Errorf("limit: %s: quota must be at least 1, got %d", s.Name, requests)
	}
	rule, err := newRule(kindQuota, s)
	if err != nil {
		return nil, err
	}
	rule.limit = requests
	rule.keyBase = "q:{" + s.Tenant + "}:" + s.Name + ":"
	rule.reason = rule.describe()
	return rule, nil
}

// NewConcurrency compiles a cap on requests in flight. The cap is enforced per edge, at
// the edge's share (max ÷ live edges, at least 1); the mode is not used.
func NewConcurrency(s Scope, max int64) (*Rule, error) {
	if max < 1 {
		return nil, fmt.Errorf("limit: %s: concurrency must be at least 1, got %d", s.Name, max)
	}
	rule, err := newRule(kindConcurrency, s)
	if err != nil {
		return nil, err
	}
	rule.limit = max
	rule.reason = rule.describe()
	return rule, nil
}

// PlanRules compiles a plan into its rate, quota and concurrency rules, each nil
// when the plan sets none. The three share the scope's name (they count different
// things, so their state is kept apart).
func PlanRules(s Scope, p *tenants.ConsumerPlan) (rate, quota, concurrency *Rule, err error) {
	if p == nil {
		return nil, nil, nil, nil
	}
	if p.RateLimit != nil {
		if rate, err = NewRate(s, RateOf(p.RateLimit)); err != nil {
			return nil, nil, nil, err
		}
	}
	if p.Quota != nil {
		if quota, err = NewQuota(s, p.Quota.Requests); err != nil {
			return nil, nil, nil, err
		}
	}
	if p.Concurrency > 0 {
		if concurrency, err = NewConcurrency(s, int64(p.Concurrency)); err != nil {
			return nil, nil, nil, err
		}
	}
	return rate, quota, concurrency, nil
}

func newRule(k kind, s Scope) (*Rule, error) {
	if s.Name == "" {
		return nil, errors.New("limit: a rule needs a scope name")
	}
	if int(s.Mode) >= len(modeNames) {
		return nil, fmt.Errorf("limit: %s: unknown mode %d", s.Name, s.Mode)
	}
	h := fnv.New64a()
	h.Write([]byte{byte(k)})
	h.Write([]byte(s.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(s.Name))
	return &Rule{kind: k, mode: s.Mode, tenant: s.Tenant, name: s.Name, id: h.Sum64()}, nil
}

// Mode is where the rule counts.
func (r *Rule) Mode() Mode { return r.mode }

// Name is the scope name the rule was built with.
func (r *Rule) Name() string { return r.name }

// Tenant is the tenant id the rule was built with.
func (r *Rule) Tenant() string { return r.tenant }

func (r *Rule) String() string {
	switch r.kind {
	case kindRate:
		return fmt.Sprintf("%s/%s: %d per %s, burst %d (%s)", r.tenant, r.name, r.rate.Limit, r.rate.Per, r.rate.Burst, r.mode)
	case kindQuota:
		return fmt.Sprintf("%s/%s: %d per month (%s)", r.tenant, r.name, r.limit, r.mode)
	default:
		return fmt.Sprintf("%s/%s: %d in flight", r.tenant, r.name, r.limit)
	}
}

// share is a rate rule's GCRA parameters for one of n edges: T·n, and a burst of
// ⌈burst/n⌉ (at least 1).
func (r *Rule) share(n int64) (t, tol, burst int64) {
	if n <= 1 {
		return r.interval, r.tol, r.rate.Burst
	}
	if n > maxEdges {
		n = maxEdges
	}
	t = r.interval * n
	burst = (r.rate.Burst + n - 1) / n
	return t, t * burst, burst
}
