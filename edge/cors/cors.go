// Package cors is a route's tenants.CORS compiled for the edge: the answer to a
// preflight, and the headers that let a page on an allowed origin read an answer.
package cors

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// Policy is one route's CORS settings, its header values made once.
type Policy struct {
	any         bool     // allow_origins ["*"]
	origins     [][]byte // else these, as browsers send them
	methods     []byte   // Access-Control-Allow-Methods
	headers     []byte   // Access-Control-Allow-Headers; nil: echo the preflight's
	expose      []byte   // Access-Control-Expose-Headers
	credentials bool
	maxAge      []byte
}

// Always exposed: the edge's own headers, which say which request and which refusal,
// and a gRPC-Web answer's status, which a trailers-only answer carries as headers.
var alwaysExposed = []string{"Grpc-Status", "Grpc-Message", "X-Request-Id", "X-Tollgate-Error"}

// Header names.
const (
	hOrigin         = "Origin"
	hRequestMethod  = "Access-Control-Request-Method"
	hRequestHeaders = "Access-Control-Request-Headers"
	hAllowOrigin    = "Access-Control-Allow-Origin"
	hAllowMethods   = "Access-Control-Allow-Methods"
	hAllowHeaders   = "Access-Control-Allow-Headers"
	hAllowCreds     = "Access-Control-Allow-Credentials"
	hExpose         = "Access-Control-Expose-Headers"
	hMaxAge         = "Access-Control-Max-Age"
	hVary           = "Vary"
)

// Compile makes the policy of a validated c for a route answering methods (nil: every
// method); nil for none.
func Compile(c *tenants.CORS, methods []string) *Policy {
	if c == nil {
		return nil
	}
	p := &Policy{credentials: c.AllowCredentials, maxAge: []byte(strconv.Itoa(c.MaxAgeS))}
	for _, o := range c.AllowOrigins {
		if o == "*" {
			p.any = true
			continue
		}
		p.origins = append(p.origins, []byte(o))
	}
	m := c.AllowMethods
	if len(m) == 0 {
		m = methods
	}
	if len(m) == 0 {
		m = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	}
	p.methods = []byte(strings.Join(m, ", "))
	if len(c.AllowHeaders) > 0 {
		p.headers = []byte(strings.Join(c.AllowHeaders, ", "))
	}
	p.expose = []byte(strings.Join(append(append([]string(nil), alwaysExposed...), c.ExposeHeaders...), ", "))
	return p
}

// IsPreflight says whether a request is a CORS preflight: an OPTIONS with an Origin and
// the method it asks about. It returns that method.
func IsPreflight(h *fasthttp.RequestHeader) ([]byte, bool) {
	if !h.IsOptions() {
		return nil, false
	}
	m := h.Peek(hRequestMethod)
	return m, len(m) > 0 && len(h.Peek(hOrigin)) > 0
}

// allowed is the Access-Control-Allow-Origin value for origin, nil when it is not
// allowed.
func (p *Policy) allowed(origin []byte) []byte {
	if len(origin) == 0 {
		return nil
	}
	if p.any {
		return []byte("*")
	}
	for _, o := range p.origins {
		// Origins are compared as browsers send them: lower-case scheme and host.
		if bytes.EqualFold(o, origin) {
			return origin
		}
	}
	return nil
}

// Preflight writes the answer to a preflight asking for method: 204, with the grant
// when the origin and method are allowed and without it otherwise, which the browser
// reads as a refusal.
func (p *Policy) Preflight(req *fasthttp.RequestHeader, resp *fasthttp.Response, method []byte) {
	resp.SetStatusCode(fasthttp.StatusNoContent)
	resp.SkipBody = true
	h := &resp.Header
	h.Add(hVary, "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	allow := p.allowed(req.Peek(hOrigin))
	if allow == nil || !p.allowsMethod(method) {
		return
	}
	h.SetBytesV(hAllowOrigin, allow)
	h.SetBytesV(hAllowMethods, p.methods)
	if p.headers != nil {
		h.SetBytesV(hAllowHeaders, p.headers)
	} else if asked := req.Peek(hRequestHeaders); len(asked) > 0 {
		h.SetBytesV(hAllowHeaders, asked)
	}
	if p.credentials {
		h.Set(hAllowCreds, "true")
	}
	h.SetBytesV(hMaxAge, p.maxAge)
}

func (p *Policy) allowsMethod(m []byte) bool {
	for rest := p.methods; len(rest) > 0; {
		i := bytes.IndexByte(rest, ',')
		if i < 0 {
			i = len(rest)
		}
		if bytes.Equal(bytes.TrimSpace(rest[:i]), m) {
			return true
		}
		rest = rest[min(i+1, len(rest)):]
	}
	return false
}

// Apply adds the grant to an answer to a request from origin (nil: not a cross-origin
// request), replacing any the upstream set, so the route's settings are the one
// answer. Vary: Origin goes on every answer of a route with named origins, so a shared
// cache never hands one origin's grant to another.
func (p *Policy) Apply(origin []byte, h *fasthttp.ResponseHeader) {
	if !p.any {
		h.Add(hVary, hOrigin)
	}
	allow := p.allowed(origin)
	if allow == nil {
		h.Del(hAllowOrigin)
		h.Del(hAllowCreds)
		return
	}
	h.SetBytesV(hAllowOrigin, allow)
	h.SetBytesV(hExpose, p.expose)
	if p.credentials {
		h.Set(hAllowCreds, "true")
	}
}
