package edge

import (
	"errors"
	"io"

	"tollgate/edge/h2door"
)

// bodyLimitStep enforces the route's MaxBodyBytes. A declared Content-Length over the
// limit is refused before any of the body is read. A chunked body is read up to the
// limit and then sent upstream with a Content-Length; small bodies arrive already read
// (Server.MaxRequestBodySize is the in-memory threshold) and big ones stream through.
//
// A body of unknown length that came on an HTTP/2 stream, for a route whose upstreams
// all speak HTTP/2, is left streaming: gRPC's client and bidirectional streams send
// their messages while the answer streams back, so the body cannot be read first. The
// proxy bounds it as it goes (proxy_h2.go).
func bodyLimitStep(rt *route, next handler) handler {
	limit := rt.maxBody
	h2 := rt.upstream.h2 && (rt.canary == nil || rt.canary.upstream.h2)
	return func(x *exchange) {
		req := &x.ctx.Request
		cl := req.Header.ContentLength()
		if cl > limit {
			x.fail(replyBodyTooLarge)
			return
		}
		if cl == -1 {
			stream := x.ctx.RequestBodyStream()
			if stream == nil || h2 && h2door.Request(x.ctx) != nil {
				next(x)
				return
			}
			b, ok := x.readBody(stream, limit)
			if !ok {
				return
			}
			req.SetBody(b)
			req.Header.SetContentLength(len(b))
		}
		next(x)
	}
}

// readBody reads the request's streamed body into x.body, at most limit bytes. A body
// over the limit, or one that fails to arrive, is answered here (false); the rest of it
// is still on the wire, so the connection closes.
func (x *exchange) readBody(stream io.Reader, limit int) ([]byte, bool) {
	b, err := readAtMost(x.body[:0], stream, limit)
	x.body = b
	if err != nil {
		x.ctx.SetConnectionClose()
		if err == errTooLarge {
			x.fail(replyBodyTooLarge)
		} else {
			x.fail(replyBodyRead)
		}
		return nil, false
	}
	return b, true
}

var errTooLarge = errors.New("body too large")

// readAtMost appends r's content to dst, failing with errTooLarge past limit bytes.
func readAtMost(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, errTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
