// Package hdrclass sorts header names into what the edge does with them on the way to an
// upstream: hop-by-hop fields it removes, identity fields only it may set, the
// forwarding fields it rewrites, the API key and request id it reads, and names that
// spell one of the edge's own fields another way (X.Consumer.Id, X_Consumer_Id), which
// CGI-style servers would read as the edge's. It is the per-header decision of the
// edge's one scan of a request's header block, so nothing here allocates.
package hdrclass

import "tollgate/edge/routing"

// Header classes: what the edge does with a request header of that name.
const (
	Other      = iota // passed on
	Hop               // remove
	Connection        // remove, with the headers it names
	Identity          // remove: only the edge sets it
	APIKey
	XFF
	XFP
	XFH
	Forwarded
	XRealIP
	RequestID
)

const tollgatePrefix = routing.EdgeHeaderPrefix

// Classify names the class of a header key (any case) without allocating.
func Classify(k []byte) int {
	switch len(k) {
	case 2:
		if routing.ASCIIEqualFold(k, "te") {
			return Hop
		}
	case 6:
		if routing.ASCIIEqualFold(k, "expect") {
			return Hop
		}
	case 7:
		if routing.ASCIIEqualFold(k, "upgrade") || routing.ASCIIEqualFold(k, "trailer") {
			return Hop
		}
	case 9:
		if routing.ASCIIEqualFold(k, "x-api-key") {
			return APIKey
		}
		if routing.ASCIIEqualFold(k, "forwarded") {
			return Forwarded
		}
		if routing.ASCIIEqualFold(k, "x-real-ip") {
			return XRealIP
		}
	case 10:
		if routing.ASCIIEqualFold(k, "connection") {
			return Connection
		}
		if routing.ASCIIEqualFold(k, "keep-alive") {
			return Hop
		}
	case 12:
		if routing.ASCIIEqualFold(k, "x-request-id") {
			return RequestID
		}
	case 13:
		if routing.ASCIIEqualFold(k, "x-consumer-id") {
			return Identity
		}
	case 15:
		if routing.ASCIIEqualFold(k, "x-forwarded-for") {
			return XFF
		}
		if routing.ASCIIEqualFold(k, "x-consumer-name") {
			return Identity
		}
	case 16:
		if routing.ASCIIEqualFold(k, "x-forwarded-host") {
			return XFH
		}
	case 17:
		if routing.ASCIIEqualFold(k, "x-forwarded-proto") {
			return XFP
		}
		if routing.ASCIIEqualFold(k, "transfer-encoding") {
			return Hop
		}
	case 18:
		if routing.ASCIIEqualFold(k, "proxy-authenticate") {
			return Hop
		}
	case 19:
		if routing.ASCIIEqualFold(k, "proxy-authorization") {
			return Hop
		}
	}
	if len(k) >= len(tollgatePrefix) && routing.ASCIIEqualFold(k[:len(tollgatePrefix)], tollgatePrefix) {
		return Identity
	}
	return Other
}

// edgeHeaders are the request headers the edge sets, or decides on, for the upstream
// (lower case). A client's header whose name differs from one of them only in its
// punctuation is dropped: CGI and the servers built like it (PHP, WSGI, Rack, nginx's
// variables) fold "-", "_", "." and other punctuation alike, so X.Consumer.Id or
// X~Consumer~Id would reach them as the edge's X-Consumer-Id.
var edgeHeaders = []string{
	"x-consumer-id", "x-consumer-name", "x-api-key",
	"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip", "x-request-id",
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"proxy-authorization", "proxy-authenticate", "traceparent", "tracestate",
}

// foldName maps a header-name byte to its folded form: ASCII letters to lower case,
// digits to themselves, everything else to "-".
var foldName = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			t[c] = byte(c)
		case c >= 'A' && c <= 'Z':
			t[c] = byte(c) + 'a' - 'A'
		default:
			t[c] = '-'
		}
	}
	return t
}()

// plainName marks the bytes of an ordinary header name: letters, digits and "-". A name
// made of them alone folds to itself, so it needs no lookup.
var plainName = func() (t [256]bool) {
	for c := range t {
		t[c] = foldName[c] != '-' || c == '-'
	}
	return t
}()

// edgeHeaderFolds holds edgeHeaders as folded names; maxEdgeHeader is the longest.
var edgeHeaderFolds, maxEdgeHeader = func() (map[string]bool, int) {
	m, n := make(map[string]bool, len(edgeHeaders)), 0
	for _, h := range edgeHeaders {
		m[h] = true
		n = max(n, len(h))
	}
	return m, n
}()

// SpoofsEdge reports a header name Classify left alone that must not reach the
// upstream: any name with "_" (nginx's underscores_in_headers off), and any name that
// folds to one of edgeHeaders or to X-Tollgate-*. An ordinary name costs one pass over
// its bytes; none allocates.
func SpoofsEdge(k []byte) bool {
	plain := true
	for _, c := range k {
		if c == '_' {
			return true
		}
		plain = plain && plainName[c]
	}
	if plain {
		return false // folds to itself, and classify matched the edge's own names
	}
	var buf [64]byte
	f := buf[:0]
	for i, c := range k {
		if i == len(tollgatePrefix) && string(f) == tollgatePrefix {
			return true
		}
		if i == len(buf) {
			break
		}
		f = append(f, foldName[c])
	}
	if string(f) == tollgatePrefix {
		return true
	}
	return len(f) == len(k) && len(f) <= maxEdgeHeader && edgeHeaderFolds[string(f)]
}

// ClassifyResponse is Classify for response headers: only hop-by-hop ones matter.
// Transfer-Encoding is left to fasthttp, which frames the body it relays itself.
func ClassifyResponse(k []byte) int {
	switch len(k) {
	case 2, 7, 18, 19:
		if c := Classify(k); c == Hop {
			return c
		}
	case 10:
		return Classify(k)
	}
	return Other
}

// IsEdgeHeader reports whether lower, a lower-case header name, is one the edge sets or
// decides on for the upstream.
func IsEdgeHeader(lower string) bool { return edgeHeaderFolds[lower] }
