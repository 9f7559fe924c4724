package edge

import (
	"bytes"
	"iter"
	"sort"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"tollgate/tenants"
)

// transform is a route's tenants.Transform compiled once per snapshot: names as bytes,
// map entries in a fixed order, the prefix rewrite normalized. nil parts do nothing.
type transform struct {
	reqHeaders  *headerOps
	json        *jsonOps
	prefix      bool
	from, to    []byte // without a trailing slash: "/" is ""
	respHeaders *headerOps
}

type headerOps struct {
	remove [][]byte
	rename [][2][]byte
	add    [][2][]byte
}

type jsonOps struct {
	remove []string
	rename [][2]string
	set    []jsonSet

	// The same paths split into keys for the one-pass editor (transform_json.go); nil
	// when onePass is false: some path is one it leaves to sjson.
	onePass    bool
	removeKeys [][][]byte
	renameKeys [][2][][]byte
	setKeys    [][][]byte
}

type jsonSet struct {
	path  string
	value []byte
}

// compileTransform returns nil when t does nothing.
func compileTransform(t *tenants.Transform) *transform {
	if t == nil {
		return nil
	}
	c := &transform{}
	if q := t.Request; q != nil {
		c.reqHeaders = compileHeaderOps(q.Headers)
		if j := q.JSON; j != nil && len(j.Set)+len(j.Remove)+len(j.Rename) > 0 {
			c.json = &jsonOps{remove: append([]string(nil), j.Remove...)}
			for _, k := range sortedKeys(j.Rename) {
				c.json.rename = append(c.json.rename, [2]string{k, j.Rename[k]})
			}
			for _, k := range sortedKeys(j.Set) {
				c.json.set = append(c.json.set, jsonSet{path: k, value: append([]byte(nil), j.Set[k]...)})
			}
			c.json.splitPaths()
		}
		if q.Path != nil && q.Path.Prefix != nil {
			c.prefix = true
			c.from = []byte(strings.TrimSuffix(q.Path.Prefix.From, "/"))
			c.to = []byte(strings.TrimSuffix(q.Path.Prefix.To, "/"))
		}
	}
	if r := t.Response; r != nil {
		c.respHeaders = compileHeaderOps(r.Headers)
	}
	if c.reqHeaders == nil && c.json == nil && !c.prefix && c.respHeaders == nil {
		return nil
	}
	return c
}

func compileHeaderOps(h *tenants.HeaderTransform) *headerOps {
	if h == nil || len(h.Add)+len(h.Remove)+len(h.Rename) == 0 {
		return nil
	}
	o := &headerOps{}
	for _, n := range h.Remove {
		o.remove = append(o.remove, []byte(n))
	}
	for _, k := range sortedKeys(h.Rename) {
		o.rename = append(o.rename, [2][]byte{[]byte(k), []byte(h.Rename[k])})
	}
	for _, k := range sortedKeys(h.Add) {
		o.add = append(o.add, [2][]byte{[]byte(k), []byte(h.Add[k])})
	}
	return o
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// headerSet is what headerOps needs of a fasthttp request or response header.
type headerSet interface {
	All() iter.Seq2[[]byte, []byte]
	DelBytes(key []byte)
	SetBytesKV(key, value []byte)
	AddBytesKV(key, value []byte)
}

// apply edits h: remove, rename, add. Names match case-insensitively (response header
// names keep the upstream's spelling).
func (o *headerOps) apply(h headerSet) {
	for _, n := range o.remove {
		delFold(h, n)
	}
	for _, r := range o.rename {
		var vals [][]byte
		for k, v := range h.All() {
			if bytes.EqualFold(k, r[0]) {
				vals = append(vals, append([]byte(nil), v...))
			}
		}
		if vals == nil {
			continue
		}
		delFold(h, r[0])
		delFold(h, r[1])
		for _, v := range vals {
			h.AddBytesKV(r[1], v)
		}
	}
	for _, a := range o.add {
		delFold(h, a[0])
		h.SetBytesKV(a[0], a[1])
	}
}

// delFold deletes every header named name in any letter case. Keys are collected first:
// deleting while iterating is not safe.
func delFold(h headerSet, name []byte) {
	var keys [][]byte
	for k := range h.All() {
		if bytes.EqualFold(k, name) {
			keys = append(keys, append([]byte(nil), k...))
		}
	}
	for _, k := range keys {
		h.DelBytes(k)
	}
}

// splitPaths prepares the one-pass editor's paths, or leaves onePass false.
func (j *jsonOps) splitPaths() {
	for _, p := range j.remove {
		k := splitJSONPath(p)
		if k == nil {
			return
		}
		j.removeKeys = append(j.removeKeys, k)
	}
	for _, r := range j.rename {
		from, to := splitJSONPath(r[0]), splitJSONPath(r[1])
		if from == nil || to == nil || pathInside(from, to) || pathInside(to, from) {
			return
		}
		j.renameKeys = append(j.renameKeys, [2][][]byte{from, to})
	}
	for _, s := range j.set {
		k := splitJSONPath(s.path)
		if k == nil {
			return
		}
		j.setKeys = append(j.setKeys, k)
	}
	j.onePass = true
}

// apply returns the rewritten body, built whole before anything is replaced, or the
// reply refusing it. The body returned may be the buffer of ed, non-nil then: ed.release,
// once the body has been copied, returns it to the pool.
func (j *jsonOps) apply(body []byte) (out []byte, ed *jsonEditor, r *reply) {
	if !gjson.ValidBytes(body) {
		return nil, nil, replyJSONMalformed
	}
	if p := skipJSONSpace(body, 0); p == len(body) || body[p] != '{' {
		return nil, nil, replyJSONNotObject
	}
	if j.onePass && jsonOnePass.Load() {
		ed := jsonEditorPool.Get().(*jsonEditor)
		if out, err := ed.run(j, body); err == nil {
			return out, ed, nil
		}
		ed.release()
	}
	out, r = j.applySJSON(body)
	return out, nil, r
}

// applySJSON is apply through sjson, one copy of the body per edit.
func (j *jsonOps) applySJSON(body []byte) ([]byte, *reply) {
	out := body // sjson copies: body is never modified in place
	var err error
	for _, p := range j.remove {
		if out, err = sjson.DeleteBytes(out, p); err != nil {
			return nil, replyTransformFailed
		}
	}
	for _, r := range j.rename {
		v := gjson.GetBytes(out, r[0])
		if !v.Exists() {
			continue
		}
		if out, err = sjson.SetRawBytes(out, r[1], []byte(v.Raw)); err != nil {
			return nil, replyTransformFailed
		}
		if out, err = sjson.DeleteBytes(out, r[0]); err != nil {
			return nil, replyTransformFailed
		}
	}
	for _, s := range j.set {
		if out, err = sjson.SetRawBytes(out, s.path, s.value); err != nil {
			return nil, replyTransformFailed
		}
	}
	if !gjson.ValidBytes(out) {
		return nil, replyInternalError // a bug in the rewrite: never forward it
	}
	return out, nil
}

// rewritePath applies the prefix rewrite to p (the path after strip_prefix), into buf.
func (t *transform) rewritePath(p []byte, buf *[]byte) []byte {
	if !bytes.HasPrefix(p, t.from) || len(p) > len(t.from) && p[len(t.from)] != '/' {
		return p
	}
	out := append((*buf)[:0], t.to...)
	out = append(out, p[len(t.from):]...)
	if len(out) == 0 {
		out = append(out, '/')
	}
	*buf = out
	return out
}

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
	if t := rt.transform; t != nil && t.prefix {
		p = t.rewritePath(p, &x.scratch)
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
		if t.json != nil && isJSONType(req.Header.ContentType()) {
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
				out, ed, r := t.json.apply(body)
				if r != nil {
					x.fail(r)
					return
				}
				req.SetBody(out)
				ed.release()
				req.Header.SetContentLength(len(out))
			} else if streamed {
				req.SetBody(nil) // the stream is spent
			}
		}
		if t.reqHeaders != nil {
			t.reqHeaders.apply(&req.Header)
		}
		next(x)
	}
}

// responseTransformStep rewrites the headers of the upstream's answer; the body is left
// to stream.
func responseTransformStep(rt *route, next handler) handler {
	ops := rt.transform.respHeaders
	return func(x *exchange) {
		next(x)
		if x.reply == nil {
			ops.apply(&x.ctx.Response.Header)
		}
	}
}

var strIdentity = []byte("identity")

// isJSONType reports whether a Content-Type is application/json or a +json type.
func isJSONType(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	if len(ct) < 5 {
		return false
	}
	return bytes.EqualFold(ct, []byte("application/json")) ||
		bytes.HasPrefix(bytes.ToLower(ct), []byte("application/")) && bytes.EqualFold(ct[len(ct)-5:], []byte("+json"))
}

var (
	replyJSONMalformed   = newReply(tenants.EInvalidRequest, "the request body is not valid JSON")
	replyJSONNotObject   = newReply(tenants.EInvalidRequest, "the request body must be a JSON object")
	replyJSONEncoded     = newReply(tenants.EInvalidRequest, "this API rewrites JSON bodies: send the body without a Content-Encoding")
	replyTransformFailed = newReply(tenants.EInvalidRequest, "the request body could not be rewritten as this API requires")
)
