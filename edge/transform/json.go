package transform

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
)

// The JSON rewrite in one pass. sjson, which JSONOps.apply falls back to, scans the body
// and copies it whole for every remove, rename and set: S3's five edits of a 1 KB body
// took five scans, five copies and 17 allocations. Editor instead splits only the
// objects the paths walk through into members (slices of the body), applies the edits
// to that small tree in the order sjson would, and writes the result once into a pooled
// buffer; values the edits do not reach are copied as they are.
//
// It gives what sjson gives for every document it takes on; whatever it cannot answer
// exactly as sjson would it refuses (errJSONFallback) and sjson does the whole rewrite:
// a path through an array or a scalar, a key spelled with an escape in an object a path
// walks, a key present twice there, a path with a numeric component (sjson makes
// arrays of those). Only the formatting differs: the objects it edits are written
// without the spaces between their members.

// jsonOnePass is the switch (SetJSONOnePass); on by default.
var jsonOnePass atomic.Bool

func init() { jsonOnePass.Store(true) }

// SetJSONOnePass chooses whether request JSON rewrites run in one pass over the body
// (true, the default) or through sjson, one copy of the body per edit
// (TOLLGATE_EDGE_JSON_ONE_PASS). Both give the same document.
func SetJSONOnePass(on bool) { jsonOnePass.Store(on) }

// splitJSONPath returns p's keys, or nil when the one-pass editor cannot take p.
func splitJSONPath(p string) [][]byte {
	var keys [][]byte
	for _, k := range strings.Split(p, ".") {
		if k == "" || allDigits(k) || k[0] == '-' {
			return nil
		}
		for i := 0; i < len(k); i++ {
			b := k[i]
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
				return nil
			}
		}
		keys = append(keys, []byte(k))
	}
	return keys
}

// pathInside reports whether a lies inside b or is b.
func pathInside(a, b [][]byte) bool {
	if len(a) < len(b) {
		return false
	}
	for i := range b {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// jsonMember is one member of an object being edited: its key as written (between the
// quotes) and its value, either raw JSON or (node >= 0) an object split for editing.
type jsonMember struct {
	key  []byte
	raw  []byte
	node int
}

type jsonNode struct {
	members []jsonMember
	escaped bool // a key holds a backslash: keys cannot be compared as bytes
}

type jsonFallback struct{}

func (jsonFallback) Error() string { return "json edit needs sjson" }

var errJSONFallback error = jsonFallback{}

// Editor holds one rewrite's tree; pooled, so a rewrite allocates nothing once the
// pool is warm.
type Editor struct {
	nodes []jsonNode
	out   []byte
}

var editorPool = sync.Pool{New: func() any { return new(Editor) }}

// maxPooledJSONOut keeps a rare huge body's buffer out of the pool.
const maxPooledJSONOut = 256 << 10

// release returns ed to the pool; a nil ed (sjson's rewrite) has nothing to return.
func (ed *Editor) Release() {
	if ed == nil {
		return
	}
	if cap(ed.out) > maxPooledJSONOut {
		ed.out = nil
	}
	for i := range ed.nodes {
		clear(ed.nodes[i].members[:cap(ed.nodes[i].members)])
	}
	ed.nodes = ed.nodes[:0]
	editorPool.Put(ed)
}

// newNode returns the index of a fresh node holding the members of the object raw (nil:
// an empty object).
func (ed *Editor) newNode(raw []byte) int {
	if len(ed.nodes) < cap(ed.nodes) {
		ed.nodes = ed.nodes[:len(ed.nodes)+1]
	} else {
		ed.nodes = append(ed.nodes, jsonNode{})
	}
	i := len(ed.nodes) - 1
	n := &ed.nodes[i]
	n.members = n.members[:0]
	n.escaped = false
	if raw == nil {
		return i
	}
	p := 1 // past '{'
	for {
		p = skipJSONSpace(raw, p)
		if raw[p] == '}' {
			return i
		}
		if raw[p] == ',' {
			p = skipJSONSpace(raw, p+1)
		}
		ks := p + 1
		ke := endJSONString(raw, p)
		key := raw[ks : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			n.escaped = true
		}
		p = skipJSONSpace(raw, ke)
		p = skipJSONSpace(raw, p+1) // past ':'
		ve := endJSONValue(raw, p)
		n.members = append(n.members, jsonMember{key: key, raw: raw[p:ve], node: -1})
		p = ve
	}
}

// find returns the index of key's member in node n, -1 when there is none.
func (ed *Editor) find(n int, key []byte) (int, error) {
	nd := &ed.nodes[n]
	if nd.escaped {
		return -1, errJSONFallback
	}
	at := -1
	for i := range nd.members {
		if bytes.Equal(nd.members[i].key, key) {
			if at >= 0 {
				return -1, errJSONFallback
			}
			at = i
		}
	}
	return at, nil
}

// object returns the node of member m of node n, splitting its value when it is an
// object; a value of any other kind cannot be walked through here.
func (ed *Editor) object(n, m int) (int, error) {
	mem := &ed.nodes[n].members[m]
	if mem.node >= 0 {
		return mem.node, nil
	}
	if len(mem.raw) == 0 || mem.raw[0] != '{' {
		return -1, errJSONFallback
	}
	c := ed.newNode(mem.raw) // may move ed.nodes
	ed.nodes[n].members[m].node = c
	return c, nil
}

// parent walks to the object holding the last key of p; -1 when a key on the way is
// missing (and create is false).
func (ed *Editor) parent(p [][]byte, create bool) (int, error) {
	n := 0
	for _, k := range p[:len(p)-1] {
		m, err := ed.find(n, k)
		if err != nil {
			return -1, err
		}
		if m < 0 {
			if !create {
				return -1, nil
			}
			c := ed.newNode(nil)
			ed.nodes[n].members = append(ed.nodes[n].members, jsonMember{key: k, node: c})
			n = c
			continue
		}
		if n, err = ed.object(n, m); err != nil {
			return -1, err
		}
	}
	return n, nil
}

func (ed *Editor) remove(p [][]byte) error {
	n, err := ed.parent(p, false)
	if err != nil || n < 0 {
		return err
	}
	m, err := ed.find(n, p[len(p)-1])
	if err != nil || m < 0 {
		return err
	}
	ms := ed.nodes[n].members
	ed.nodes[n].members = append(ms[:m], ms[m+1:]...)
	return nil
}

// set gives p the value v (raw JSON, or node >= 0), in place when p exists, else as a
// new last member, creating the objects on the way.
func (ed *Editor) set(p [][]byte, raw []byte, node int) error {
	n, err := ed.parent(p, true)
	if err != nil {
		return err
	}
	k := p[len(p)-1]
	m, err := ed.find(n, k)
	if err != nil {
		return err
	}
	if m < 0 {
		ed.nodes[n].members = append(ed.nodes[n].members, jsonMember{key: k, raw: raw, node: node})
		return nil
	}
	mem := &ed.nodes[n].members[m]
	mem.raw, mem.node = raw, node
	return nil
}

// get returns p's member as raw JSON or a node; ok is false when p is missing.
func (ed *Editor) get(p [][]byte) (raw []byte, node int, ok bool, err error) {
	n, err := ed.parent(p, false)
	if err != nil || n < 0 {
		return nil, -1, false, err
	}
	m, err := ed.find(n, p[len(p)-1])
	if err != nil || m < 0 {
		return nil, -1, false, err
	}
	mem := ed.nodes[n].members[m]
	return mem.raw, mem.node, true, nil
}

// run applies j's edits to body, a valid JSON object, and returns the result in ed.out.
func (ed *Editor) run(j *JSONOps, body []byte) ([]byte, error) {
	start, end := skipJSONSpace(body, 0), len(body)
	for body[end-1] != '}' { // valid JSON: only spaces follow the root object
		end--
	}
	ed.newNode(body[start:end])
	for _, p := range j.removeKeys {
		if err := ed.remove(p); err != nil {
			return nil, err
		}
	}
	for _, r := range j.renameKeys {
		raw, node, ok, err := ed.get(r[0])
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		// The two paths are disjoint (tenants.Validate), so moving the value shares no
		// node between two places once the old one is removed.
		if err := ed.set(r[1], raw, node); err != nil {
			return nil, err
		}
		if err := ed.remove(r[0]); err != nil {
			return nil, err
		}
	}
	for i, p := range j.setKeys {
		if err := ed.set(p, j.set[i].value, -1); err != nil {
			return nil, err
		}
	}
	ed.out = ed.write(ed.out[:0], 0)
	return ed.out, nil
}

func (ed *Editor) write(out []byte, n int) []byte {
	out = append(out, '{')
	for i, m := range ed.nodes[n].members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, m.key...)
		out = append(out, '"', ':')
		if m.node >= 0 {
			out = ed.write(out, m.node)
		} else {
			out = append(out, m.raw...)
		}
	}
	return append(out, '}')
}

// The scanners below read JSON already checked valid (gjson.ValidBytes).

func skipJSONSpace(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r') {
		p++
	}
	return p
}

// endJSONString returns the index past the closing quote of the string opening at p.
func endJSONString(b []byte, p int) int {
	for p++; p < len(b); {
		q := bytes.IndexByte(b[p:], '"')
		if q < 0 {
			return len(b)
		}
		p += q
		esc := 0 // the quote is escaped by an odd run of backslashes before it
		for i := p - 1; b[i] == '\\'; i-- {
			esc++
		}
		p++
		if esc%2 == 0 {
			return p
		}
	}
	return len(b)
}

// endJSONValue returns the index past the value starting at p.
func endJSONValue(b []byte, p int) int {
	switch b[p] {
	case '"':
		return endJSONString(b, p)
	case '{', '[':
		depth := 0
		for ; p < len(b); p++ {
			switch b[p] {
			case '"':
				p = endJSONString(b, p) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return p + 1
				}
			}
		}
		return len(b)
	}
	for p < len(b) {
		switch b[p] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return p
		}
		p++
	}
	return p
}
