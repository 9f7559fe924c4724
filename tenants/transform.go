package tenants

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Transform rewrites what passes through a route: the request's headers, JSON body and
// path on the way to the upstream, the response's headers on the way back.
type Transform struct {
	Request  *RequestTransform  `json:"request,omitempty"`
	Response *ResponseTransform `json:"response,omitempty"`
}

// RequestTransform is applied after authentication, access rules, limits and the body limit,
// before the request goes upstream.
type RequestTransform struct {
	Headers *HeaderTransform `json:"headers,omitempty"`
	JSON    *JSONTransform   `json:"json,omitempty"`
	Path    *PathTransform   `json:"path,omitempty"`
}

// ResponseTransform is applied to the upstream's answer (not to the edge's own errors).
type ResponseTransform struct {
	Headers *HeaderTransform `json:"headers,omitempty"`
}

// HeaderTransform edits headers in this order: remove, rename, add. Add sets a header,
// replacing any value it had; rename moves a header's values to a new name (replacing
// the new name's) and does nothing when the header is absent.
type HeaderTransform struct {
	Add    map[string]string `json:"add,omitempty"`
	Remove []string          `json:"remove,omitempty"`
	Rename map[string]string `json:"rename,omitempty"`
}

// JSONTransform edits a JSON object request body in this order: remove, rename, set.
// Paths are gjson/sjson paths restricted to dot-separated keys ("a.b"); a numeric
// component indexes an array. It applies only to requests whose Content-Type is JSON;
// a body that is not a JSON object is refused with 400.
type JSONTransform struct {
	Set    map[string]json.RawMessage `json:"set,omitempty"`
	Remove []string                   `json:"remove,omitempty"`
	Rename map[string]string          `json:"rename,omitempty"`
}

// PathTransform rewrites the path sent upstream (after strip_prefix).
type PathTransform struct {
	Prefix *PrefixRewrite `json:"prefix,omitempty"`
}

// PrefixRewrite replaces a leading From (on a segment boundary) with To: with
// From "/v1" and To "/v2", "/v1/users" goes upstream as "/v2/users"; "/v10" is left alone.
type PrefixRewrite struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Transform limits.
const (
	MaxTransformOps        = 32   // entries per add/remove/rename/set list
	MaxHeaderNameLen       = 128  // bytes
	MaxHeaderValueLen      = 4096 // bytes
	MaxJSONPathLen         = 256  // bytes
	MaxJSONPathDepth       = 16   // components
	MaxJSONSetValueBytes   = 8192 // one set value
	MaxTransformPrefixLen  = 256  // path prefix from/to
	maxJSONSetValuesBytes  = 65536
	transformFieldRequest  = "transform.request."
	transformFieldResponse = "transform.response."
)

// reservedHeaders may not be touched by a transform: hop-by-hop headers, the ones the
// edge itself manages, and the identity headers the upstream trusts the edge for.
var reservedHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-authenticate": true, "proxy-authorization": true,
	"proxy-connection": true, "te": true, "trailer": true, "trailers": true, "transfer-encoding": true,
	"upgrade": true, "host": true, "content-length": true, "x-request-id": true, "x-api-key": true,
	"forwarded": true, "x-real-ip": true,
}

// reservedHeaderPrefixes are reserved families (X-Consumer-Id, X-Forwarded-For…).
var reservedHeaderPrefixes = []string{"x-consumer-", "x-forwarded-"}

func validHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("header name is empty")
	}
	if len(name) > MaxHeaderNameLen {
		return fmt.Errorf("header name is longer than %d bytes", MaxHeaderNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%q is not a valid header name (byte %d is not a token character)", name, i)
		}
	}
	l := strings.ToLower(name)
	if reservedHeaders[l] {
		return fmt.Errorf("%s is managed by the edge and cannot be transformed", name)
	}
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(l, p) {
			return fmt.Errorf("%s is managed by the edge and cannot be transformed", name)
		}
	}
	return nil
}

// requestHeaderName refuses '_' in a request header name a tenant configures. The edge
// drops every request header whose name has one, as nginx does by default, because
// CGI-style upstreams (PHP, WSGI, Rack) read X_Consumer_Id and X-Consumer-Id as the same
// HTTP_X_CONSUMER_ID: a rule matching such a name would never match, and a header added
// under one would reach the upstream as the dash spelling's variable.
func requestHeaderName(name string) error {
	if i := strings.IndexByte(name, '_'); i >= 0 {
		return fmt.Errorf("%q has '_' at byte %d: the edge drops request headers whose names contain '_' (CGI-style upstreams read them as the '-' spelling); use %q", name, i, strings.ReplaceAll(name, "_", "-"))
	}
	return nil
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func validHeaderValue(v string) error {
	if len(v) > MaxHeaderValueLen {
		return fmt.Errorf("header value is longer than %d bytes", MaxHeaderValueLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("header value has a control character at byte %d", i)
		}
	}
	return nil
}

// validJSONPath accepts dot-separated components of [A-Za-z0-9_-], which gjson and
// sjson read literally (no wildcards, queries or modifiers).
func validJSONPath(p string) error {
	if p == "" {
		return fmt.Errorf("path is empty")
	}
	if len(p) > MaxJSONPathLen {
		return fmt.Errorf("path is longer than %d bytes", MaxJSONPathLen)
	}
	parts := strings.Split(p, ".")
	if len(parts) > MaxJSONPathDepth {
		return fmt.Errorf("path %q has more than %d components", p, MaxJSONPathDepth)
	}
	for _, c := range parts {
		if c == "" {
			return fmt.Errorf("path %q has an empty component", p)
		}
		for i := 0; i < len(c); i++ {
			b := c[i]
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
				return fmt.Errorf("path %q may only use letters, digits, _ and - between dots", p)
			}
		}
	}
	return nil
}

func validPrefix(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("must start with /")
	}
	if len(p) > MaxTransformPrefixLen {
		return fmt.Errorf("must be at most %d bytes", MaxTransformPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= 0x20 || c >= 0x7f || c == '?' || c == '#' || c == '%' || c == '\\' {
			return fmt.Errorf("%q has a byte not allowed in a path prefix at %d", p, i)
		}
	}
	if strings.Contains(p, "//") || strings.Contains(p+"/", "/./") || strings.Contains(p+"/", "/../") {
		return fmt.Errorf("%q is not a normalized path", p)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validateHeaderTransform checks the header edits of one direction; request ones also
// follow requestHeaderName.
func validateHeaderTransform(h *HeaderTransform, field string, request bool) error {
	if h == nil {
		return nil
	}
	checkName := func(name string) error {
		if err := validHeaderName(name); err != nil || !request {
			return err
		}
		return requestHeaderName(name)
	}
	if len(h.Add) > MaxTransformOps {
		return Invalid(field+".add", "may have at most %d headers, got %d", MaxTransformOps, len(h.Add))
	}
	if len(h.Remove) > MaxTransformOps {
		return Invalid(field+".remove", "may have at most %d headers, got %d", MaxTransformOps, len(h.Remove))
	}
	if len(h.Rename) > MaxTransformOps {
		return Invalid(field+".rename", "may have at most %d headers, got %d", MaxTransformOps, len(h.Rename))
	}
	for i, n := range h.Remove {
		if err := checkName(n); err != nil {
			return Invalid(fmt.Sprintf("%s.remove[%d]", field, i), "%v", err)
		}
	}
	for _, k := range sortedKeys(h.Rename) {
		f := fmt.Sprintf("%s.rename[%q]", field, k)
		if err := checkName(k); err != nil {
			return Invalid(f, "%v", err)
		}
		if err := checkName(h.Rename[k]); err != nil {
			return Invalid(f, "%v", err)
		}
		if strings.EqualFold(k, h.Rename[k]) {
			return Invalid(f, "renames %s to itself", k)
		}
	}
	for _, k := range sortedKeys(h.Add) {
		f := fmt.Sprintf("%s.add[%q]", field, k)
		if err := checkName(k); err != nil {
			return Invalid(f, "%v", err)
		}
		if err := validHeaderValue(h.Add[k]); err != nil {
			return Invalid(f, "%v", err)
		}
	}
	return nil
}

func validateJSONTransform(j *JSONTransform, field string) error {
	if j == nil {
		return nil
	}
	if len(j.Set) > MaxTransformOps {
		return Invalid(field+".set", "may have at most %d paths, got %d", MaxTransformOps, len(j.Set))
	}
	if len(j.Remove) > MaxTransformOps {
		return Invalid(field+".remove", "may have at most %d paths, got %d", MaxTransformOps, len(j.Remove))
	}
	if len(j.Rename) > MaxTransformOps {
		return Invalid(field+".rename", "may have at most %d paths, got %d", MaxTransformOps, len(j.Rename))
	}
	for i, p := range j.Remove {
		if err := validJSONPath(p); err != nil {
			return Invalid(fmt.Sprintf("%s.remove[%d]", field, i), "%v", err)
		}
	}
	for _, k := range sortedKeys(j.Rename) {
		f := fmt.Sprintf("%s.rename[%q]", field, k)
		if err := validJSONPath(k); err != nil {
			return Invalid(f, "%v", err)
		}
		if err := validJSONPath(j.Rename[k]); err != nil {
			return Invalid(f, "%v", err)
		}
		if to := j.Rename[k]; k == to || strings.HasPrefix(to, k+".") || strings.HasPrefix(k, to+".") {
			return Invalid(f, "renames %s to %s: one path may not lie inside the other", k, to)
		}
	}
	total := 0
	for _, k := range sortedKeys(j.Set) {
		f := fmt.Sprintf("%s.set[%q]", field, k)
		if err := validJSONPath(k); err != nil {
			return Invalid(f, "%v", err)
		}
		v := j.Set[k]
		if len(v) == 0 || !json.Valid(v) {
			return Invalid(f, "value must be JSON")
		}
		if len(v) > MaxJSONSetValueBytes {
			return Invalid(f, "value is longer than %d bytes", MaxJSONSetValueBytes)
		}
		total += len(v)
	}
	if total > maxJSONSetValuesBytes {
		return Invalid(field+".set", "values total more than %d bytes", maxJSONSetValuesBytes)
	}
	return nil
}

// Validate checks t; field paths start with "transform.".
func (t *Transform) Validate() error {
	if t == nil {
		return nil
	}
	if q := t.Request; q != nil {
		if err := validateHeaderTransform(q.Headers, transformFieldRequest+"headers", true); err != nil {
			return err
		}
		if err := validateJSONTransform(q.JSON, transformFieldRequest+"json"); err != nil {
			return err
		}
		if q.Path != nil {
			if q.Path.Prefix == nil {
				return Invalid(transformFieldRequest+"path.prefix", "is required when path is given")
			}
			if err := validPrefix(q.Path.Prefix.From); err != nil {
				return Invalid(transformFieldRequest+"path.prefix.from", "%v", err)
			}
			if err := validPrefix(q.Path.Prefix.To); err != nil {
				return Invalid(transformFieldRequest+"path.prefix.to", "%v", err)
			}
		}
	}
	if r := t.Response; r != nil {
		if err := validateHeaderTransform(r.Headers, transformFieldResponse+"headers", false); err != nil {
			return err
		}
	}
	return nil
}
