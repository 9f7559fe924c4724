// Package routing is the pure part of the edge's request dispatch: the route table (a
// method and a normalized path to a route), request-path normalization and the reading
// of a tenant slug from a Host header. It does no I/O and knows no HTTP library: inputs
// are byte slices, so every function here can be fuzzed alone.
package routing

import (
	"strings"
)

// Table maps method + normalized path to a tenant's route (an R; the table holds *R). It
// is a tree of path segments: a lookup walks one node per segment of the request path,
// so its cost depends on the path's depth, not on how many routes the tenant has (50,000
// routes cost what one does). Nodes with many children use a map, small ones a slice
// scanned in order.
//
// Matching rules (README, "The edge"): a route path is a prefix on segment boundaries
// ("/hello" matches "/hello" and "/hello/x", not "/helloworld"); "=/hello" matches only
// "/hello"; the longest matching path wins; at the same path an exact route beats a prefix
// route, and a route listing the request's method beats one answering every method. A
// longer path whose routes do not take the method falls back to a shorter one that does.
//
// A Table is immutable once built; lookups need no lock and do not allocate.
type Table[R any] struct {
	root node[R]
	size int
}

// node is one path segment. slash is the child for an empty segment, which only a
// trailing "/" produces ("/a/" is "a" then "").
type node[R any] struct {
	kids   []kid[R]
	kidMap map[string]*node[R]
	slash  *node[R]
	exact  methodSet[R]
	prefix methodSet[R]
}

type kid[R any] struct {
	seg  string
	node *node[R]
}

// mapKidsAbove is the child count above which a node switches from a scanned slice to a
// map: below it a few string compares beat hashing the segment.
const mapKidsAbove = 8

// Methods a route may list (tenants.ValidatePath's set), by index.
const (
	mGET = iota
	mHEAD
	mPOST
	mPUT
	mPATCH
	mDELETE
	mOPTIONS
	numMethods
)

// methodSet holds the routes of one path: per listed method, and for every method.
type methodSet[R any] struct {
	any *R
	by  [numMethods]*R
}

func (s *methodSet[R]) pick(mi int) *R {
	if mi >= 0 {
		if r := s.by[mi]; r != nil {
			return r
		}
	}
	return s.any
}

// methodIndex is the index of a method routes may list, or -1 for any other method
// (such a request matches only routes that take every method).
func methodIndex(m []byte) int {
	switch len(m) {
	case 3:
		if string(m) == "GET" {
			return mGET
		}
		if string(m) == "PUT" {
			return mPUT
		}
	case 4:
		if string(m) == "POST" {
			return mPOST
		}
		if string(m) == "HEAD" {
			return mHEAD
		}
	case 5:
		if string(m) == "PATCH" {
			return mPATCH
		}
	case 6:
		if string(m) == "DELETE" {
			return mDELETE
		}
	case 7:
		if string(m) == "OPTIONS" {
			return mOPTIONS
		}
	}
	return -1
}

func (n *node[R]) child(seg []byte) *node[R] {
	if len(seg) == 0 {
		return n.slash
	}
	if n.kidMap != nil {
		return n.kidMap[string(seg)]
	}
	for i := range n.kids {
		if n.kids[i].seg == string(seg) {
			return n.kids[i].node
		}
	}
	return nil
}

func (n *node[R]) addChild(seg string) *node[R] {
	if seg == "" {
		if n.slash == nil {
			n.slash = &node[R]{}
		}
		return n.slash
	}
	if n.kidMap != nil {
		c := n.kidMap[seg]
		if c == nil {
			c = &node[R]{}
			n.kidMap[seg] = c
		}
		return c
	}
	for i := range n.kids {
		if n.kids[i].seg == seg {
			return n.kids[i].node
		}
	}
	c := &node[R]{}
	n.kids = append(n.kids, kid[R]{seg, c})
	if len(n.kids) > mapKidsAbove {
		n.kidMap = make(map[string]*node[R], len(n.kids))
		for _, k := range n.kids {
			n.kidMap[k.seg] = k.node
		}
		n.kids = nil
	}
	return c
}

// Add files r under one of its paths (validated: "/a/b", "=/a/b", "/a/") for the given
// methods (empty: every method). When a slot is already taken the first route keeps it
// and Add returns the route that holds it.
func (t *Table[R]) Add(path string, methods []string, r *R) (conflict *R) {
	exact := strings.HasPrefix(path, "=")
	path = strings.TrimPrefix(path, "=")
	n := &t.root
	if path != "/" {
		for _, seg := range strings.Split(path[1:], "/") {
			n = n.addChild(seg)
		}
	}
	set := &n.prefix
	if exact {
		set = &n.exact
	}
	t.size++
	if len(methods) == 0 {
		if set.any != nil {
			return set.any
		}
		set.any = r
		return nil
	}
	for _, m := range methods {
		mi := methodIndex([]byte(m))
		if mi < 0 {
			continue // Route.Validate admits only the methods above
		}
		if set.by[mi] != nil {
			if conflict == nil {
				conflict = set.by[mi]
			}
			continue
		}
		set.by[mi] = r
	}
	return conflict
}

// Lookup finds the route for a method and a normalized path (see NormalizePath). It
// returns the route and the length of the path prefix the route's path covers, without a
// trailing "/" (what strip_prefix removes); nil when no route matches.
func (t *Table[R]) Lookup(method, path []byte) (*R, int) {
	mi := methodIndex(method)
	n := &t.root
	best, bestLen := n.prefix.pick(mi), 0 // "/" matches everything
	if len(path) <= 1 {
		if r := n.exact.pick(mi); r != nil {
			return r, 0
		}
		return best, 0
	}
	pos := 1
	for {
		e := pos
		for e < len(path) && path[e] != '/' {
			e++
		}
		c := n.child(path[pos:e])
		if c == nil {
			break
		}
		n = c
		if e == len(path) {
			if r := n.prefix.pick(mi); r != nil {
				best, bestLen = r, e
			}
			if r := n.exact.pick(mi); r != nil {
				best, bestLen = r, e
			}
			break
		}
		// The path goes on after a "/": prefix routes of this node match, and so do
		// those of its trailing-slash child ("/a/" matches "/a/b").
		if r := n.prefix.pick(mi); r != nil {
			best, bestLen = r, e
		}
		if s := n.slash; s != nil {
			if r := s.prefix.pick(mi); r != nil {
				best, bestLen = r, e
			}
		}
		pos = e + 1
	}
	return best, bestLen
}

// Len is the number of (path, route) entries in the table.
func (t *Table[R]) Len() int { return t.size }
