// Package transform is a route's rewrites, compiled once per snapshot (Compile): request
// and response headers, the request path, and the request's JSON body, edited in one pass
// over the body (Editor) with sjson as the fallback.
package transform

import (
	"bytes"
	"iter"
	"sort"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"tollgate/tenants"
)

// Transform is a route's tenants.Transform compiled once per snapshot: names as bytes,
// map entries in a fixed order, the prefix rewrite normalized. nil parts do nothing.
type Transform struct {
	ReqHeaders  *HeaderOps
	JSON        *JSONOps
	Prefix      bool   // RewritePath has a prefix to rewrite
	from, to    []byte // without a trailing slash: "/" is ""
	RespHeaders *HeaderOps
}

type HeaderOps struct {
	remove [][]byte
	rename [][2][]byte
	add    [][2][]byte
}

type JSONOps struct {
	remove []string
	rename [][2]string
	set    []jsonSet

	// The same paths split into keys for the one-pass editor (json.go); nil
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

// Compile returns nil when t does nothing.
func Compile(t *tenants.Transform) *Transform {
	if t == nil {
		return nil
	}
	c := &Transform{}
	if q := t.Request; q != nil {
		c.ReqHeaders = compileHeaderOps(q.Headers)
		if j := q.JSON; j != nil && len(j.Set)+len(j.Remove)+len(j.Rename) > 0 {
			c.JSON = &JSONOps{remove: append([]string(nil), j.Remove...)}
			for _, k := range sortedKeys(j.Rename) {
				c.JSON.rename = append(c.JSON.rename, [2]string{k, j.Rename[k]})
			}
			for _, k := range sortedKeys(j.Set) {
				c.JSON.set = append(c.JSON.set, jsonSet{path: k, value: append([]byte(nil), j.Set[k]...)})
			}
			c.JSON.splitPaths()
		}
		if q.Path != nil && q.Path.Prefix != nil {
			c.Prefix = true
			c.from = []byte(strings.TrimSuffix(q.Path.Prefix.From, "/"))
			c.to = []byte(strings.TrimSuffix(q.Path.Prefix.To, "/"))
		}
	}
	if r := t.Response; r != nil {
		c.RespHeaders = compileHeaderOps(r.Headers)
	}
	if c.ReqHeaders == nil && c.JSON == nil && !c.Prefix && c.RespHeaders == nil {
		return nil
	}
	return c
}

func compileHeaderOps(h *tenants.HeaderTransform) *HeaderOps {
	if h == nil || len(h.Add)+len(h.Remove)+len(h.Rename) == 0 {
		return nil
	}
	o := &HeaderOps{}
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

// HeaderSet is what HeaderOps needs of a fasthttp request or response header.
type HeaderSet interface {
	All() iter.Seq2[[]byte, []byte]
	DelBytes(key []byte)
	SetBytesKV(key, value []byte)
	AddBytesKV(key, value []byte)
}

// Apply edits h: remove, rename, add. Names match case-insensitively (response header
// names keep the upstream's spelling).
func (o *HeaderOps) Apply(h HeaderSet) {
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
func delFold(h HeaderSet, name []byte) {
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
func (j *JSONOps) splitPaths() {
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

// Refusal says why a JSON rewrite gave no body; the edge answers each with its own
// reply. OK is a rewrite that went through.
type Refusal uint8

const (
	OK        Refusal = iota
	Malformed         // the body is not valid JSON
	NotObject         // the body is not a JSON object
	Failed            // sjson could not apply an edit
	Internal          // the rewrite gave invalid JSON: a bug, never forwarded
)

func (r Refusal) String() string {
	return [...]string{"ok", "malformed", "not an object", "failed", "internal"}[r]
}

// Apply returns the rewritten body, built whole before anything is replaced, or why it
// refused it. The body returned may be the buffer of ed, non-nil then: ed.Release,
// once the body has been copied, returns it to the pool.
func (j *JSONOps) Apply(body []byte) (out []byte, ed *Editor, r Refusal) {
	if !gjson.ValidBytes(body) {
		return nil, nil, Malformed
	}
	if p := skipJSONSpace(body, 0); p == len(body) || body[p] != '{' {
		return nil, nil, NotObject
	}
	if j.onePass && jsonOnePass.Load() {
		ed := editorPool.Get().(*Editor)
		if out, err := ed.run(j, body); err == nil {
			return out, ed, OK
		}
		ed.Release()
	}
	out, r = j.applySJSON(body)
	return out, nil, r
}

// applySJSON is apply through sjson, one copy of the body per edit.
func (j *JSONOps) applySJSON(body []byte) ([]byte, Refusal) {
	out := body // sjson copies: body is never modified in place
	var err error
	for _, p := range j.remove {
		if out, err = sjson.DeleteBytes(out, p); err != nil {
			return nil, Failed
		}
	}
	for _, r := range j.rename {
		v := gjson.GetBytes(out, r[0])
		if !v.Exists() {
			continue
		}
		if out, err = sjson.SetRawBytes(out, r[1], []byte(v.Raw)); err != nil {
			return nil, Failed
		}
		if out, err = sjson.DeleteBytes(out, r[0]); err != nil {
			return nil, Failed
		}
	}
	for _, s := range j.set {
		if out, err = sjson.SetRawBytes(out, s.path, s.value); err != nil {
			return nil, Failed
		}
	}
	if !gjson.ValidBytes(out) {
		return nil, Internal // a bug in the rewrite: never forward it
	}
	return out, OK
}

// RewritePath applies the prefix rewrite to p (the path after strip_prefix), into buf.
func (t *Transform) RewritePath(p []byte, buf *[]byte) []byte {
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

// IsJSONType reports whether a Content-Type is application/json or a +json type.
func IsJSONType(ct []byte) bool {
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
