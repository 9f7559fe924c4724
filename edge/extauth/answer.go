package extauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"tollgate/tenants"
)

// Answer is an authorizer's 200 answer, checked.
type Answer struct {
	Allow    bool
	Consumer string
	Headers  [][2]string // canonical names
	TTL      *int
	Status   int
	Message  string
}

// ParseAnswer reads an authorizer's 200 answer. Unknown fields are ignored, so an
// authorizer may say more than the edge reads; what the edge reads must be right: allow
// present and boolean, a denial's status 4xx (default 403) and message at most
// MaxMessage bytes of UTF-8, ttl_s 0–3600, at most 32 headers, each a plain name
// (letters, digits, "-") that owned does not claim, with a value of at most 4 KiB and no
// control character.
func ParseAnswer(b []byte, owned func(name []byte) bool) (Answer, error) {
	var raw struct {
		Allow    *bool             `json:"allow"`
		Consumer string            `json:"consumer"`
		Headers  map[string]string `json:"headers"`
		TTL      *int              `json:"ttl_s"`
		Status   int               `json:"status"`
		Message  string            `json:"message"`
	}
	var a Answer
	if err := json.Unmarshal(b, &raw); err != nil {
		return a, fmt.Errorf("not the JSON object expected: %v", err)
	}
	if raw.Allow == nil {
		return a, errors.New(`no "allow"`)
	}
	a.Allow = *raw.Allow
	if raw.TTL != nil && (*raw.TTL < 0 || *raw.TTL > tenants.MaxAuthCacheTTLS) {
		return a, fmt.Errorf("ttl_s must be between 0 and %d", tenants.MaxAuthCacheTTLS)
	}
	a.TTL = raw.TTL
	if !a.Allow {
		a.Status = raw.Status
		if a.Status == 0 {
			a.Status = 403
		}
		if a.Status < 400 || a.Status > 499 {
			return a, fmt.Errorf("status %d is not 4xx", a.Status)
		}
		if len(raw.Message) > MaxMessage || !utf8.ValidString(raw.Message) {
			return a, fmt.Errorf("message over %d bytes or not UTF-8", MaxMessage)
		}
		a.Message = raw.Message
		return a, nil
	}
	if len(raw.Consumer) > MaxConsumer || !utf8.ValidString(raw.Consumer) {
		return a, errors.New("consumer too long or not UTF-8")
	}
	a.Consumer = raw.Consumer
	if len(raw.Headers) > maxHeaders {
		return a, fmt.Errorf("more than %d headers", maxHeaders)
	}
	for k, v := range raw.Headers {
		if err := checkHeader(k, v, owned); err != nil {
			return a, err
		}
		a.Headers = append(a.Headers, [2]string{canonical(k), v})
	}
	return a, nil
}

// checkHeader refuses a header an authorizer may not set: not a plain name, one the
// edge sets or removes itself (owned: identity, forwarding, hop-by-hop, framing), or a
// value that could not travel in a header.
func checkHeader(k, v string, owned func([]byte) bool) error {
	if !PlainName(k) {
		return fmt.Errorf("header %q is not a plain header name", k)
	}
	if owned != nil && owned([]byte(k)) {
		return fmt.Errorf("header %q is the gateway's own", k)
	}
	if len(v) > maxHeaderValue {
		return fmt.Errorf("header %q is over %d bytes", k, maxHeaderValue)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("header %q has a control character", k)
		}
	}
	return nil
}

// PlainName: 1–64 letters, digits and "-".
func PlainName(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// canonical is k as fasthttp writes it (X-User-Id).
func canonical(k string) string {
	b := []byte(k)
	up := true
	for i, c := range b {
		switch {
		case up && c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !up && c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		up = c == '-'
	}
	return string(b)
}
