package edge

import (
	"bytes"
	"io"

	"tollgate/edge/hdrclass"
	"tollgate/edge/routing"

	"github.com/valyala/fasthttp"
)

// Header handling.
//
// Towards the upstream the edge removes, whatever route the request takes:
//   - hop-by-hop headers: Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization,
//     TE, Trailer, Transfer-Encoding, Upgrade, and every header the Connection header
//     names (except Host and Content-Length, which frame the request the edge sends);
//   - Expect (the edge has already answered "100-continue" and read the body);
//   - identity headers only the edge may set: X-Consumer-Id, X-Consumer-Name and any
//     X-Tollgate-*;
//   - every header whose name contains '_' (nginx's underscores_in_headers off): CGI and
//     the servers that follow it (PHP, WSGI, Rack) map X-Consumer-Id and X_Consumer_Id
//     to the same HTTP_X_CONSUMER_ID variable, so an underscore spelling would pass a
//     forged identity, or override any header the edge sets, under the dash spelling;
//   - for the same reason every header whose name folds (any case, every byte other
//     than a letter or digit read as "-") to a header the edge sets or decides on
//     (package hdrclass) or to X-Tollgate-*, though spelled otherwise: X.Consumer.Id,
//     X~Forwarded~For, X-Request!Id;
//   - X-API-Key on routes that authenticated with it (the upstream gets X-Consumer-Id);
//   - from a peer outside TrustedProxies: X-Forwarded-For, -Proto, -Host, Forwarded and
//     X-Real-Ip. From a trusted peer the X-Forwarded-* values are kept and the peer's
//     address is appended to X-Forwarded-For.
//
// It then sets X-Forwarded-For (the peer address, appended for trusted peers),
// X-Forwarded-Proto ("http"/"https" of the edge listener), X-Forwarded-Host (the Host the
// tenant was found by), X-Request-Id (the client's when it is 1–128 of [A-Za-z0-9._:-],
// else a fresh one), X-Consumer-Id and X-Consumer-Name (when a key matched), and Host
// (the target's host).
//
// A chunked request's trailer fields are dropped when its body ends (trailerStrip).
//
// Towards the client it removes the hop-by-hop headers of the upstream's response (and
// those its Connection header names) and sets X-Request-Id.
//
// The request side works from fasthttp's immutable copy of the raw header block, so one
// scan finds everything and deletions never disturb the iteration; a request carrying
// none of these headers costs that scan and no deletion.

var (
	hdrConnection   = []byte("Connection")
	hdrXAPIKey      = []byte("X-Api-Key")
	hdrConsumerID   = []byte("X-Consumer-Id")
	hdrConsumerName = []byte("X-Consumer-Name")
	hdrXFF          = []byte("X-Forwarded-For")
	hdrXFP          = []byte("X-Forwarded-Proto")
	hdrXFH          = []byte("X-Forwarded-Host")
	hdrForwarded    = []byte("Forwarded")
	hdrXRealIP      = []byte("X-Real-Ip")
	hdrRequestID    = []byte("X-Request-Id")
)

// Flags of headers found in a request.
const (
	hXAPIKey uint32 = 1 << iota
	hXFF
	hXFP
	hXFH
	hForwarded
	hXRealIP
	hXRequestID
)

type headerScan struct {
	has         uint32
	apiKey      []byte
	reqID       []byte
	clientReqID bool // reqID is the client's own and valid, so it is passed on as is
}

// scanRequestHeaders reads the raw request header block once: it removes the hop-by-hop,
// identity and underscore headers from the request that will go upstream and notes the
// values the later steps need (API key, request id, X-Forwarded-For chain). It runs
// before anything reads the request, so no step (cache key, canary match, hash) and no
// upstream, WebSocket ones included, sees a header it removed.
func (x *exchange) scanRequestHeaders(raw []byte) {
	h := &x.ctx.Request.Header
	hs := &x.hs
	for len(raw) > 0 {
		var k, v []byte
		k, v, raw = routing.NextHeader(raw)
		if k == nil {
			continue
		}
		switch hdrclass.Classify(k) {
		case hdrclass.Other:
			if hdrclass.SpoofsEdge(k) {
				h.DelBytes(k)
			}
		case hdrclass.Hop, hdrclass.Identity:
			h.DelBytes(k)
		case hdrclass.Connection:
			delConnectionTokens(v, h.DelBytes)
			h.DelBytes(hdrConnection)
		case hdrclass.APIKey:
			if hs.has&hXAPIKey == 0 {
				hs.apiKey = v
			}
			hs.has |= hXAPIKey
		case hdrclass.XFF:
			if hs.has&hXFF != 0 {
				x.xff = append(x.xff, ", "...)
			}
			x.xff = append(x.xff, v...)
			hs.has |= hXFF
		case hdrclass.XFP:
			hs.has |= hXFP
		case hdrclass.XFH:
			hs.has |= hXFH
		case hdrclass.Forwarded:
			hs.has |= hForwarded
		case hdrclass.XRealIP:
			hs.has |= hXRealIP
		case hdrclass.RequestID:
			if hs.has&hXRequestID == 0 {
				hs.reqID = v
			} else {
				hs.reqID = nil // two ids: trust neither
			}
			hs.has |= hXRequestID
		}
	}
}

// trailerStrip reads a chunked request body and, when it ends, removes the trailer
// fields the client sent after it. fasthttp reads a trailer into the request's header,
// outside the raw block scanRequestHeaders judged, and writes it after the body it
// forwards; so a trailer would carry X-Consumer-Id, X-Tollgate-* or an underscore name
// past the scan. Nothing upstream needs a request trailer (nginx drops them too). A field
// the client sent both as a header and as a trailer goes with it. It lives in the
// exchange, so wrapping the body allocates nothing.
type trailerStrip struct {
	r io.Reader
	h *fasthttp.RequestHeader
}

func (s *trailerStrip) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		for k := range s.h.Trailers() {
			s.h.DelBytes(k)
		}
		_ = s.h.SetTrailerBytes(nil) // and the announcement, so the body is sent sized
	}
	return n, err
}

// stripTrailers puts trailerStrip in front of a chunked request body, before any step
// reads it.
func (x *exchange) stripTrailers() {
	req := &x.ctx.Request
	if req.Header.ContentLength() != -1 {
		return
	}
	s := x.ctx.RequestBodyStream()
	if s == nil {
		return
	}
	x.trailers = trailerStrip{r: s, h: &req.Header}
	req.SetBodyStream(&x.trailers, -1)
}

// delConnectionTokens deletes each header a Connection value names, except the ones
// that frame the message the edge sends, and returns how many it named.
func delConnectionTokens(v []byte, del func([]byte)) int {
	n := 0
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) == 0 || routing.ASCIIEqualFold(tok, "host") || routing.ASCIIEqualFold(tok, "content-length") ||
			routing.ASCIIEqualFold(tok, "close") || routing.ASCIIEqualFold(tok, "keep-alive") {
			// close/keep-alive are options, not header names (and Keep-Alive goes anyway).
			continue
		}
		del(tok)
		n++
	}
	return n
}

// cleanResponseHeaders removes the upstream response's hop-by-hop headers. fasthttp keeps
// "Connection: close" as a flag; it is the upstream's business, not the client's (the
// server still closes the client connection when the client asked or on shutdown).
// Response header names keep the upstream's spelling, so the names a Connection header
// lists are matched without case in a second pass, which only such a response needs.
func (x *exchange) cleanResponseHeaders() {
	h := &x.ctx.Response.Header
	h.ResetConnectionClose()
	// Collect first (copied into scratch), delete after: deleting while iterating is
	// undefined.
	d := hopNames{s: x.scratch[:0]}
	tokens := false
	for k, v := range h.All() {
		switch hdrclass.ClassifyResponse(k) {
		case hdrclass.Hop:
			d.add(k)
		case hdrclass.Connection:
			d.add(k)
			if !connectionOptionsOnly(v) && delConnectionTokens(v, d.add) > 0 {
				tokens = true
			}
		}
	}
	if tokens {
		named := d.n
		for k := range h.All() {
			start := 0
			for i := 0; i < named; i++ {
				if bytes.EqualFold(k, d.s[start:d.ends[i]]) && !bytes.Equal(k, d.s[start:d.ends[i]]) {
					d.add(k)
					break
				}
				start = d.ends[i]
			}
		}
	}
	start := 0
	for i := 0; i < d.n; i++ {
		h.DelBytes(d.s[start:d.ends[i]])
		start = d.ends[i]
	}
	x.scratch = d.s
}

// hopNames collects up to 16 header names to delete: ends[i] delimits the i-th in s.
type hopNames struct {
	s    []byte
	ends [16]int
	n    int
}

func (d *hopNames) add(k []byte) {
	if d.n < len(d.ends) {
		d.s = append(d.s, k...)
		d.ends[d.n] = len(d.s)
		d.n++
	}
}

// connectionOptionsOnly reports a Connection value that names no header: "keep-alive"
// or "close", what nearly every upstream sends.
func connectionOptionsOnly(v []byte) bool {
	return routing.ASCIIEqualFold(v, "keep-alive") || routing.ASCIIEqualFold(v, "close")
}
