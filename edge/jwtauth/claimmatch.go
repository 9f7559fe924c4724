package jwtauth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ClaimMatch is a match on one claim of a verified token, compiled: where the claim is
// in the token's payload and the values that match (a canary's match on a claim). It
// reads the payload's JSON in place, without decoding the claims into a map.
type ClaimMatch struct {
	top    string   // gjson path of the top-level claim with the exact name
	nested []string // for a dotted name: gjson paths of its parts; nil otherwise
	values []string
}

// NewClaimMatch compiles a match on the claim name, found as the consumer and roles
// claims are: the top-level claim with that exact name or, when there is none and the
// name has dots, the value at that path through nested objects. With values empty any
// value but null matches.
func NewClaimMatch(name string, values []string) *ClaimMatch {
	m := &ClaimMatch{top: gjson.Escape(name), values: values}
	if strings.Contains(name, ".") {
		for _, p := range strings.Split(name, ".") {
			m.nested = append(m.nested, gjson.Escape(p))
		}
	}
	return m
}

// MatchToken reports whether the claim in tok, a token already verified, matches. The
// payload is decoded into buf, grown as needed and returned for the next call, so a
// caller that keeps it allocates nothing once it has grown to its tokens' size.
func (m *ClaimMatch) MatchToken(tok, buf []byte) (bool, []byte) {
	payload := Payload(tok)
	if payload == nil {
		return false, buf
	}
	n := base64.RawURLEncoding.DecodedLen(len(payload))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	b := buf[:n]
	n, err := base64.RawURLEncoding.Decode(b, payload)
	if err != nil || n == 0 {
		return false, buf
	}
	return m.Matches(unsafe.String(&b[0], n)), buf
}

// Payload is the middle segment of a compact JWS, or nil.
func Payload(tok []byte) []byte {
	i := bytes.IndexByte(tok, '.')
	if i < 0 {
		return nil
	}
	rest := tok[i+1:]
	j := bytes.IndexByte(rest, '.')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

// Matches reports whether the claim in a token's JSON payload matches. The payload is
// not kept.
func (m *ClaimMatch) Matches(payload string) bool {
	v := gjson.Get(payload, m.top)
	if !v.Exists() && m.nested != nil {
		v = gjson.Parse(payload)
		for _, p := range m.nested {
			if !v.IsObject() {
				return false
			}
			v = v.Get(p)
		}
	}
	if !v.Exists() || v.Type == gjson.Null {
		return false
	}
	if len(m.values) == 0 {
		return true
	}
	if v.IsArray() {
		found := false
		v.ForEach(func(_, e gjson.Result) bool {
			found = m.scalarIn(e)
			return !found
		})
		return found
	}
	return m.scalarIn(v)
}

// scalarIn reports whether a string, number or boolean claim value is one of the
// values: a string as is, a number or boolean by its JSON text ("42", "true").
func (m *ClaimMatch) scalarIn(v gjson.Result) bool {
	var s string
	switch v.Type {
	case gjson.String:
		s = v.Str
	case gjson.Number, gjson.True, gjson.False:
		s = v.Raw
	default:
		return false
	}
	for _, want := range m.values {
		if s == want {
			return true
		}
	}
	return false
}
