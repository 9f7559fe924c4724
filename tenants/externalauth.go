package tenants

import (
	"fmt"
	"net/textproto"
	"strings"
)

// ExternalAuth is a route's external authorizer: the tenant's own HTTPS service, which
// the edge asks about each request of a route with auth AuthExternal (or reuses its
// cached answer for the same credentials) before anything else of the route runs. The
// wire protocol, the cache and the failure rules are the edge's (edge/authenticate_external.go)
// and docs/authorizers.md.
type ExternalAuth struct {
	URL string `json:"url" required:"true" doc:"https:// URL the edge POSTs each request's description to; no credentials, query or fragment. Its address is held to the operator's upstream address rules, at save time and at every connect."`
	// Headers are the request headers sent to the authorizer, canonicalized; their
	// values are also what answers are cached by.
	Headers []string `json:"headers,omitempty" doc:"Request headers sent to the authorizer, and what its answers are cached by (1–16 names). Default: Authorization, X-API-Key, Cookie."`
	// TimeoutMS bounds the whole exchange with the authorizer, connect included.
	TimeoutMS int `json:"timeout_ms,omitempty" doc:"The whole exchange with the authorizer, connect included, 1–5000 ms. Default: 1000."`
	// CacheTTLS keeps an allowing answer this long (0: never cached); DenyCacheTTLS a
	// denying one. An answer's own ttl_s may shorten or lengthen it up to MaxAuthCacheTTLS.
	CacheTTLS     *int `json:"cache_ttl_s,omitempty" doc:"Seconds an allowing answer is reused for the same header values, 0–3600 (0: ask on every request). Default: 60."`
	DenyCacheTTLS *int `json:"deny_cache_ttl_s,omitempty" doc:"Seconds a denying answer is reused, 0 to cache_ttl_s. Default: 10, or cache_ttl_s when smaller."`
}

// Defaults and bounds of external authorizers.
const (
	DefaultAuthTimeoutMS     = 1000
	MaxAuthTimeoutMS         = 5000
	DefaultAuthCacheTTLS     = 60
	DefaultAuthDenyCacheTTLS = 10
	MaxAuthCacheTTLS         = 3600
	MaxAuthHeaders           = 16
)

// DefaultAuthHeaders are the headers an authorizer receives when the route names none:
// where credentials travel.
var DefaultAuthHeaders = []string{"Authorization", "X-Api-Key", "Cookie"}

// Validate checks a with the route's auth mode and fills its defaults. The URL's host
// is held to p as an upstream target's is.
func (a *ExternalAuth) Validate(p *UpstreamAddressRule, auth string) error {
	if auth != AuthExternal {
		if a != nil {
			return Invalid("external_auth", "is only for auth external; this route's auth is %q", auth)
		}
		return nil
	}
	if a == nil {
		return Invalid("external_auth", "is required with auth external")
	}
	if !strings.HasPrefix(strings.ToLower(a.URL), "https://") {
		return Invalid("external_auth.url", "must be an https:// URL")
	}
	v, err := p.ValidateTarget(a.URL)
	if err != nil {
		return Invalid("external_auth.url", "%v", err)
	}
	a.URL = v
	if a.Headers == nil {
		a.Headers = append([]string(nil), DefaultAuthHeaders...)
	}
	if len(a.Headers) == 0 || len(a.Headers) > MaxAuthHeaders {
		return Invalid("external_auth.headers", "must list 1 to %d header names", MaxAuthHeaders)
	}
	seen := make(map[string]bool, len(a.Headers))
	for i, h := range a.Headers {
		if !plainHeaderName(h) {
			return Invalid(fmt.Sprintf("external_auth.headers[%d]", i), "%q is not a header name (letters, digits and -, at most 64)", h)
		}
		c := textproto.CanonicalMIMEHeaderKey(h)
		if seen[c] {
			return Invalid(fmt.Sprintf("external_auth.headers[%d]", i), "%s is listed twice", c)
		}
		seen[c] = true
		a.Headers[i] = c
	}
	switch {
	case a.TimeoutMS == 0:
		a.TimeoutMS = DefaultAuthTimeoutMS
	case a.TimeoutMS < 1 || a.TimeoutMS > MaxAuthTimeoutMS:
		return Invalid("external_auth.timeout_ms", "must be between 1 and %d, got %d", MaxAuthTimeoutMS, a.TimeoutMS)
	}
	if a.CacheTTLS == nil {
		a.CacheTTLS = intPtr(DefaultAuthCacheTTLS)
	}
	if t := *a.CacheTTLS; t < 0 || t > MaxAuthCacheTTLS {
		return Invalid("external_auth.cache_ttl_s", "must be between 0 and %d, got %d", MaxAuthCacheTTLS, t)
	}
	if a.DenyCacheTTLS == nil {
		a.DenyCacheTTLS = intPtr(min(DefaultAuthDenyCacheTTLS, *a.CacheTTLS))
	}
	if t := *a.DenyCacheTTLS; t < 0 || t > *a.CacheTTLS {
		return Invalid("external_auth.deny_cache_ttl_s", "must be between 0 and cache_ttl_s (%d), got %d", *a.CacheTTLS, t)
	}
	return nil
}

func intPtr(n int) *int { return &n }

// plainHeaderName: an ordinary header name, letters, digits and "-" (an underscore or
// other punctuation would be dropped by the edge before the authorizer saw it).
func plainHeaderName(h string) bool {
	if h == "" || len(h) > 64 {
		return false
	}
	for _, c := range []byte(h) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
