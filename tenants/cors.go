package tenants

import (
	"fmt"
	"net/url"
	"strings"
)

// CORS lets browsers on other origins call a route: the edge answers the route's
// preflights itself (before authentication: a browser sends no credentials with them)
// and adds Access-Control-Allow-Origin, and what goes with it, to the route's answers
// for an allowed Origin, its own refusals included, so a page can read why it was
// refused. A gRPC-Web call's trailers travel as headers a page can read only when they
// are exposed, so Grpc-Status and Grpc-Message always are.
type CORS struct {
	// AllowOrigins are the origins ("https://app.example.com", scheme, host and port
	// only) allowed to read answers, or "*" for any.
	AllowOrigins []string `json:"allow_origins"`
	// AllowMethods answer a preflight's Access-Control-Request-Method. Default: the
	// route's methods (every method when it names none).
	AllowMethods []string `json:"allow_methods,omitempty"`
	// AllowHeaders answer a preflight's Access-Control-Request-Headers. Default: the
	// headers the preflight asks for, echoed.
	AllowHeaders []string `json:"allow_headers,omitempty"`
	// ExposeHeaders are the answer's headers a page may read beyond the CORS-safelisted
	// ones; Grpc-Status, Grpc-Message, X-Request-Id and X-Tollgate-Error are always among
	// them.
	ExposeHeaders []string `json:"expose_headers,omitempty"`
	// AllowCredentials lets pages send cookies and HTTP authentication. Browsers refuse
	// it with "*", so it needs named origins.
	AllowCredentials bool `json:"allow_credentials,omitempty"`
	// MaxAgeS is how long a browser may reuse a preflight's answer, in seconds.
	// Default: DefaultCORSMaxAgeS.
	MaxAgeS int `json:"max_age_s,omitempty"`
}

// CORS limits and defaults.
const (
	MaxCORSOrigins     = 64
	MaxCORSHeaders     = 32
	MaxCORSMaxAgeS     = 86400
	DefaultCORSMaxAgeS = 600
)

// Validate checks c and normalizes it (origins lower-cased, methods upper-cased); field
// paths start with "cors.".
func (c *CORS) Validate() error {
	if c == nil {
		return nil
	}
	if len(c.AllowOrigins) == 0 || len(c.AllowOrigins) > MaxCORSOrigins {
		return Invalid("cors.allow_origins", "must list 1–%d origins (or \"*\"), got %d", MaxCORSOrigins, len(c.AllowOrigins))
	}
	for i, o := range c.AllowOrigins {
		field := fmt.Sprintf("cors.allow_origins[%d]", i)
		if o == "*" {
			if len(c.AllowOrigins) > 1 {
				return Invalid(field, "\"*\" allows every origin: list it alone")
			}
			if c.AllowCredentials {
				return Invalid(field, "\"*\" cannot go with allow_credentials (browsers refuse the pair): name the origins")
			}
			continue
		}
		norm, err := corsOrigin(o)
		if err != nil {
			return Invalid(field, "%v", err)
		}
		c.AllowOrigins[i] = norm
	}
	if len(c.AllowMethods) > len(knownMethods) {
		return Invalid("cors.allow_methods", "lists too many methods")
	}
	for i, m := range c.AllowMethods {
		u := strings.ToUpper(m)
		if !knownMethods[u] {
			return Invalid(fmt.Sprintf("cors.allow_methods[%d]", i), "%q is not a method routes may use (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)", m)
		}
		c.AllowMethods[i] = u
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"cors.allow_headers", c.AllowHeaders}, {"cors.expose_headers", c.ExposeHeaders}} {
		if len(list.names) > MaxCORSHeaders {
			return Invalid(list.field, "may name at most %d headers, got %d", MaxCORSHeaders, len(list.names))
		}
		for i, n := range list.names {
			if n == "" || len(n) > MaxHeaderNameLen {
				return Invalid(fmt.Sprintf("%s[%d]", list.field, i), "header name must be 1–%d bytes", MaxHeaderNameLen)
			}
			for j := 0; j < len(n); j++ {
				if !isTokenChar(n[j]) {
					return Invalid(fmt.Sprintf("%s[%d]", list.field, i), "%q is not a valid header name (byte %d is not a token character)", n, j)
				}
			}
		}
	}
	if c.MaxAgeS == 0 {
		c.MaxAgeS = DefaultCORSMaxAgeS
	}
	if c.MaxAgeS < 0 || c.MaxAgeS > MaxCORSMaxAgeS {
		return Invalid("cors.max_age_s", "must be between 1 and %d, got %d", MaxCORSMaxAgeS, c.MaxAgeS)
	}
	return nil
}

// corsOrigin is o in the form browsers send in Origin: scheme://host[:port], lower
// case, the scheme's default port left out.
func corsOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("%q is not an origin like https://app.example.com", o)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: an origin's scheme is http or https", o)
	}
	if u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#") {
		return "", fmt.Errorf("%q: an origin is a scheme, a host and a port, nothing after them", o)
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); p == "" && strings.HasSuffix(host, ":") ||
		u.Scheme == "http" && p == "80" || u.Scheme == "https" && p == "443" {
		host = strings.TrimSuffix(strings.TrimSuffix(host, p), ":")
	}
	return strings.ToLower(u.Scheme) + "://" + host, nil
}
