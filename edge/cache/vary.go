package cache

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/valyala/fasthttp"

	"tollgate/edge/routing"
)

// Which answers a cache that many callers share may give to whom (RFC 9111 §4.1 and
// §3.5).
//
// The upstream's Vary names request headers its answer was made from. A key (path,
// query, the route's vary headers, the consumer) then holds one answer per combination
// of those headers' values, up to MaxVariants, and a request is given the answer
// whose values are its own. The values are read from the client's raw header block,
// which no step of the chain changes, so the request that stored an answer and the one
// that looks it up are compared on the same bytes whatever a transform does later. A
// Vary of "*", of a header the edge itself sets towards the upstream from the caller's
// address or the request (which the client's request cannot show), or one that does not
// parse, cannot be matched: such an answer is not kept. X-Consumer-Id and
// X-Consumer-Name stand for the caller the edge authenticated.
//
// Credentials (Authorization, Cookie, X-API-Key) make an answer the caller's own. It is
// kept for other callers only when the route is shared and the answer public or
// s-maxage. Otherwise every credential the request carries must be part of the key: one
// the edge consumed through the consumer (a route that authenticates and is not shared),
// any other through a Vary naming it (the route's or the upstream's) and an answer made
// public; failing that, the answer is not kept.

// MaxVariants is the most answers one key holds: a Vary storm (a new value of a
// varied header with every request) replaces a key's oldest answers instead of filling
// the route's and the tenant's share with one page.
const MaxVariants = 8

// cacheMaxVaryNames is the most headers an upstream's Vary may name for the answer to
// be kept.
const cacheMaxVaryNames = 16

// Credentials a request may carry, as flags.
const (
	CredAuthorization uint8 = 1 << iota
	CredCookie
	CredAPIKey
)

var credNames = [...]struct {
	flag uint8
	name string
}{
	{CredAuthorization, "authorization"},
	{CredCookie, "cookie"},
	{CredAPIKey, "x-api-key"},
}

// credentialOf is the flag of a credential header name (any case), or 0.
func credentialOf(name []byte) uint8 {
	for _, c := range credNames {
		if routing.ASCIIEqualFold(name, c.name) {
			return c.flag
		}
	}
	return 0
}

// credentials are the credentials a raw request header block carries (non-empty).
func Credentials(raw []byte) uint8 {
	var f uint8
	for len(raw) > 0 {
		var k, v []byte
		k, v, raw = routing.NextHeader(raw)
		if k != nil && len(v) > 0 {
			f |= credentialOf(k)
		}
	}
	return f
}

// edgeSetVary are the request headers the edge sets or replaces towards the upstream
// from the connection or per request: an answer varying on them cannot be matched by
// what a client sends.
var edgeSetVary = []string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip",
	"forwarded", "x-request-id", "traceparent", "tracestate"}

// isConsumerVary reports whether a lower-case Vary name is one of the headers naming the
// caller the edge authenticated.
func isConsumerVary(name []byte) bool {
	return string(name) == "x-consumer-id" || string(name) == "x-consumer-name"
}

var hdrVary = []byte("Vary")

// upstreamVary reads the Vary lines of an answer: the names, lower case, nil when there
// is none; ok is false when the answer may not be kept ("*", an unmatchable or invalid
// name, too many).
func upstreamVary(h *fasthttp.ResponseHeader) (names [][]byte, ok bool) {
	for k, v := range h.All() {
		if !bytes.EqualFold(k, hdrVary) {
			continue
		}
		if names, ok = parseVary(names, v); !ok {
			return nil, false
		}
	}
	return names, true
}

// parseVary appends the field names of one Vary value to names, lower case.
func parseVary(names [][]byte, v []byte) ([][]byte, bool) {
	for len(v) > 0 {
		var n []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			n, v = v[:i], v[i+1:]
		} else {
			n, v = v, nil
		}
		n = bytes.Trim(n, " \t")
		if len(n) == 0 {
			continue // an empty list element (RFC 9110 §5.6.1)
		}
		if len(names) == cacheMaxVaryNames {
			return nil, false
		}
		for _, c := range n {
			if !isTChar(c) { // "*" included
				return nil, false
			}
		}
		n = bytes.ToLower(n)
		for _, s := range edgeSetVary {
			if string(n) == s {
				return nil, false
			}
		}
		if bytes.HasPrefix(n, []byte(routing.EdgeHeaderPrefix)) {
			return nil, false
		}
		names = append(names, n)
	}
	return names, true
}

// isTChar reports whether c may be part of a field name (RFC 9110 §5.6.2); "*" is not.
func isTChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'+-.^_`|~", c) >= 0
}

// appendVaryValues appends a request's values of the Vary names to dst: for each name,
// each of its lines in the raw header block in order as a length (plus one) and the
// value, then a zero. Lengths make the encoding unambiguous whatever bytes a value holds.
// It allocates nothing beyond dst's growth.
func appendVaryValues(dst []byte, names [][]byte, raw, consumer []byte) []byte {
	for _, name := range names {
		if isConsumerVary(name) {
			dst = appendVaryValue(dst, consumer)
		} else {
			for r := raw; len(r) > 0; {
				var k, v []byte
				k, v, r = routing.NextHeader(r)
				if k != nil && bytes.EqualFold(k, name) {
					dst = appendVaryValue(dst, v)
				}
			}
		}
		dst = append(dst, 0)
	}
	return dst
}

func appendVaryValue(dst, v []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v))+1)
	return append(dst, v...)
}

func sameNames(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Caller is what the cache needs of a request to decide whom its answer may go to.
type Caller struct {
	Raw      []byte // the client's raw header block
	Consumer []byte // the authenticated consumer's id, nil when none
	Creds    uint8  // credentials carried
	Consumed uint8  // credentials the edge authenticated the caller with
}

// mayKeep reports whether an answer to c, whose Vary names names and which is public
// (or s-maxage) or not, may be kept (see the top of this file).
func (rc *Cache) mayKeep(c *Caller, names [][]byte, public bool) bool {
	if c.Creds == 0 || rc.shared && public {
		return true
	}
	for _, cn := range credNames {
		f := cn.flag
		switch {
		case c.Creds&f == 0:
		case c.Consumed&f != 0 && rc.perUser:
		case public && (rc.varyCreds&f != 0 || varyNames(names, cn.name)):
		default:
			return false
		}
	}
	return true
}

func varyNames(names [][]byte, name string) bool {
	for _, n := range names {
		if string(n) == name {
			return true
		}
	}
	return false
}
