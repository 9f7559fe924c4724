package edge

import (
	"bytes"

	"tollgate/edge/transform"
	"tollgate/tenants"
)

// upstreamPath is the path the upstream gets: the request's, less the prefix
// strip_prefix removes, with the route's prefix rewrite applied.
func (x *exchange) upstreamPath(rt *route) []byte {
	p := x.path
	if rt.strip {
		p = p[x.stripLen:]
		if len(p) == 0 {
			p = slashOnly
		}
	}
	if t := rt.transform; t != nil && t.Prefix {
		p = t.RewritePath(p, &x.scratch)
	}
	return p
}

// requestTransformStep rewrites the request's JSON body and headers. It runs after the
// body limit, so a body it has to read whole is bounded by the route's max_body_bytes.
func requestTransformStep(rt *route, next handler) handler {
	t := rt.transform
	limit := rt.maxBody
	return func(x *exchange) {
		req := &x.ctx.Request
		if t.JSON != nil && transform.IsJSONType(req.Header.ContentType()) {
			body := req.Body()
			streamed := false
			if stream := x.ctx.RequestBodyStream(); stream != nil {
				streamed = true
				b, ok := x.readBody(stream, limit)
				if !ok {
					return
				}
				body = b
			}
			if ce := req.Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, strIdentity) {
				x.fail(replyJSONEncoded)
				return
			}
			if len(body) > 0 {
				out, ed, r := t.JSON.Apply(body)
				if r != transform.OK {
					x.fail(transformRefused[r])
					return
				}
				req.SetBody(out)
				ed.Release()
				req.Header.SetContentLength(len(out))
			} else if streamed {
				req.SetBody(nil) // the stream is spent
			}
		}
		if t.ReqHeaders != nil {
			t.ReqHeaders.Apply(&req.Header)
		}
		next(x)
	}
}

// responseTransformStep rewrites the headers of the upstream's answer; the body is left
// to stream.
func responseTransformStep(rt *route, next handler) handler {
	ops := rt.transform.RespHeaders
	return func(x *exchange) {
		next(x)
		if x.reply == nil {
			ops.Apply(&x.ctx.Response.Header)
		}
	}
}

var strIdentity = []byte("identity")

var (
	replyJSONMalformed   = newReply(tenants.EInvalidRequest, "the request body is not valid JSON")
	replyJSONNotObject   = newReply(tenants.EInvalidRequest, "the request body must be a JSON object")
	replyJSONEncoded     = newReply(tenants.EInvalidRequest, "this API rewrites JSON bodies: send the body without a Content-Encoding")
	replyTransformFailed = newReply(tenants.EInvalidRequest, "the request body could not be rewritten as this API requires")

	// transformRefused answers each transform.Refusal but OK.
	transformRefused = [...]*reply{
		transform.Malformed: replyJSONMalformed,
		transform.NotObject: replyJSONNotObject,
		transform.Failed:    replyTransformFailed,
		transform.Internal:  replyInternalError,
	}
)

// SetJSONOnePass chooses how request JSON rewrites run (TOLLGATE_EDGE_JSON_ONE_PASS);
// see transform.SetJSONOnePass.
func SetJSONOnePass(on bool) { transform.SetJSONOnePass(on) }
