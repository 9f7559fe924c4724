package edge

import (
	"strings"
)

// RouteTable maps method + normalized path to a tenant's route. It is a tree of path
// segments: a lookup walks one node per segment of the request path, so its cost depends
// on the path's depth, not on how many routes the tenant has (50,000 routes cost what one
// does). Nodes with many children use a map, small ones a slice scanned in order.
//
// Matching rules (DESIGN.md "Edge"): a route path is a prefix on segment boundaries
// ("/hello" matches "/hello" and "/hello/x", not "/helloworld"); "=/hello" matches only
// "/hello"; the longest matching path wins; at the same path an exact route beats a prefix
// route, and a route listing the request's method beats one answering every method. A
// longer path whose routes do not take the method falls back to a shorter one that does.
//
// A RouteTable is immutable once built; lookups need no lock and do not allocate.
type RouteTable struct {
	root node
	size int
}

// node is one path segment. slash is the child for an empty segment, which only a
// trailing "/" produces ("/a/" is "a" then "").
type node struct {
	kids   []kid
	kidMap map[string]*node
	slash  *node
	exact  methodSet
	prefix methodSet
}

type kid struct {
	seg  string
	node *node
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
type methodSet struct {
	any *route
	by  [numMethods]*route
}

func (s *methodSet) pick(mi int) *route {
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

func (n *node) child(seg []byte) *node {
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

func (n *node) addChild(seg string) *node {
	if seg == "" {
		if n.slash == nil {
			n.slash = &node{}
		}
		return n.slash
	}
	if n.kidMap != nil {
		c := n.kidMap[seg]
		if c == nil {
			c = &node{}
			n.kidMap[seg] = c
		}
		return c
	}
	for i := range n.kids {
		if n.kids[i].seg == seg {
			return n.kids[i].node
		}
	}
	c := &node{}
	n.kids = append(n.kids, kid{seg, c})
	if len(n.kids) > mapKidsAbove {
		n.kidMap = make(map[string]*node, len(n.kids))
		for _, k := range n.kids {
			n.kidMap[k.seg] = k.node
		}
		n.kids = nil
	}
	return c
}

// add files r under one of its paths (validated: "/a/b", "=/a/b", "/a/") for the given
// methods (empty: every method). When a slot is already taken the first route keeps it
// and add returns the route that holds it.
func (t *RouteTable) add(path string, methods []string, r *route) (conflict *route) {
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

// lookup finds the route for a method and a normalized path (see normalizePath). It
// returns the route and the length of the path prefix the route's path covers, without a
// trailing "/" (what strip_prefix removes); nil when no route matches.
func (t *RouteTable) lookup(method, path []byte) (*route, int) {
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
func (t *RouteTable) Len() int { return t.size }
