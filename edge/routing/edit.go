package routing

import (
	"maps"
	"slices"
	"strings"
)

// Editor changes a copy of a Table while the original goes on serving lookups: it copies
// only the nodes along the paths it touches (and of a node with a sharded map, only the
// shard it changes), and shares every other node with the original. So a change of one
// route of a tenant with 50,000 costs a few node copies, and readers of the original see
// it whole, as it was, without a lock.
//
// An Editor is used by one goroutine; once Table has been called it must not be used
// again.
type Editor[R any] struct {
	t      Table[R]
	fresh  map[*node[R]]bool // nodes this edit made or copied: its own to change
	shards map[shardRef[R]]bool
}

type shardRef[R any] struct {
	n *node[R]
	i int
}

// Edit starts an edit of a copy of t; t itself is not changed.
func (t *Table[R]) Edit() *Editor[R] {
	ed := &Editor[R]{t: *t, fresh: map[*node[R]]bool{}, shards: map[shardRef[R]]bool{}}
	ed.t.root = *ed.copyNode(&t.root)
	ed.fresh[&ed.t.root] = true
	return ed
}

// Table is the edited table.
func (ed *Editor[R]) Table() Table[R] { return ed.t }

// copyNode is a copy of n whose child containers are its own (the maps of a sharded node
// are copied when first changed, putChild).
func (ed *Editor[R]) copyNode(n *node[R]) *node[R] {
	c := *n
	c.kids = slices.Clone(n.kids)
	if n.kidMap != nil {
		c.kidMap = maps.Clone(n.kidMap)
	}
	if n.shards != nil {
		sh := *n.shards
		c.shards = &sh
	}
	return &c
}

// setChild files c (nil: nothing) under seg of n, a node of the edit.
func (ed *Editor[R]) setChild(n *node[R], seg string, c *node[R]) {
	switch {
	case seg == "":
		n.slash = c
	case seg[0] == '{':
		n.param = c
	default:
		if n.shards != nil {
			ref := shardRef[R]{n, shardOfString(seg)}
			if !ed.shards[ref] {
				n.shards[ref.i] = maps.Clone(n.shards[ref.i])
				ed.shards[ref] = true
			}
			n.putChild(seg, c)
			return
		}
		n.putChild(seg, c)
		if n.shards != nil { // just split: every shard is new
			for i := range n.shards {
				ed.shards[shardRef[R]{n, i}] = true
			}
		}
	}
}

func getChild[R any](n *node[R], seg string) *node[R] {
	switch {
	case seg == "":
		return n.slash
	case seg[0] == '{':
		return n.param
	}
	return n.child([]byte(seg))
}

func segments(path string) []string {
	if path == "/" {
		return nil
	}
	return strings.Split(path[1:], "/")
}

// walk returns the nodes of the edit along path's segments, the root first, copying
// shared ones and making missing ones.
func (ed *Editor[R]) walk(segs []string) []*node[R] {
	nodes := make([]*node[R], 0, len(segs)+1)
	n := &ed.t.root
	nodes = append(nodes, n)
	for _, seg := range segs {
		c := getChild(n, seg)
		switch {
		case c == nil:
			c = &node[R]{}
			ed.fresh[c] = true
			ed.setChild(n, seg, c)
		case !ed.fresh[c]:
			c = ed.copyNode(c)
			ed.fresh[c] = true
			ed.setChild(n, seg, c)
		}
		nodes = append(nodes, c)
		n = c
	}
	return nodes
}

// Add is Table.Add on the edited table.
func (ed *Editor[R]) Add(path string, methods []string, r *R) (conflict *R) {
	exact := strings.HasPrefix(path, "=")
	nodes := ed.walk(segments(strings.TrimPrefix(path, "=")))
	n := nodes[len(nodes)-1]
	set := &n.prefix
	if exact {
		set = &n.exact
	}
	// The node is this edit's own, but its set may still be the published table's.
	c := methodSet[R]{}
	if *set != nil {
		c = **set
	}
	*set = &c
	ed.t.size++
	return c.add(methods, r)
}

// Clear takes every route off one path (as Add takes it: "=/a" is the exact slot of /a)
// and returns the routes that held a slot there, each once, in no particular order.
// Nodes left with nothing are removed.
func (ed *Editor[R]) Clear(path string) (held []*R) {
	exact := strings.HasPrefix(path, "=")
	segs := segments(strings.TrimPrefix(path, "="))
	n := &ed.t.root
	for _, seg := range segs { // look before copying anything
		if n = getChild(n, seg); n == nil {
			return nil
		}
	}
	set := n.prefix
	if exact {
		set = n.exact
	}
	if set == nil {
		return nil
	}
	for _, r := range append(set.by[:], set.any) {
		if r != nil && !slices.Contains(held, r) {
			held = append(held, r)
		}
	}
	ed.t.size -= int(set.adds)
	nodes := ed.walk(segs)
	n = nodes[len(nodes)-1]
	if exact {
		n.exact = nil
	} else {
		n.prefix = nil
	}
	for i := len(segs); i > 0 && nodes[i].empty(); i-- {
		ed.setChild(nodes[i-1], segs[i-1], nil)
	}
	return held
}

func (n *node[R]) empty() bool {
	return len(n.kids) == 0 && len(n.kidMap) == 0 && n.shards == nil && n.slash == nil && n.param == nil &&
		n.exact == nil && n.prefix == nil
}

// Each calls fn for every slot of the table that holds a route: the path as Add files it,
// with "{}" for every parameter and a leading "=" for an exact path, the method ("" for
// every method) and the route. The order is unspecified.
func (t *Table[R]) Each(fn func(path, method string, r *R)) {
	t.root.each("", fn)
}

var methodNames = [numMethods]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (n *node[R]) each(path string, fn func(path, method string, r *R)) {
	p := path
	if p == "" {
		p = "/"
	}
	for _, s := range []struct {
		set  *methodSet[R]
		path string
	}{{n.exact, "=" + p}, {n.prefix, p}} {
		if s.set == nil {
			continue
		}
		if s.set.any != nil {
			fn(s.path, "", s.set.any)
		}
		for i, r := range s.set.by {
			if r != nil {
				fn(s.path, methodNames[i], r)
			}
		}
	}
	for _, k := range n.kids {
		k.node.each(path+"/"+k.seg, fn)
	}
	for seg, c := range n.kidMap {
		c.each(path+"/"+seg, fn)
	}
	if n.shards != nil {
		for _, m := range n.shards {
			for seg, c := range m {
				c.each(path+"/"+seg, fn)
			}
		}
	}
	if n.slash != nil {
		n.slash.each(path+"/", fn)
	}
	if n.param != nil {
		n.param.each(path+"/{}", fn)
	}
}
