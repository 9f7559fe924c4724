// Package routing is the pure part of the edge's request dispatch: the route table (a
// method and a normalized path to a route), request-path normalization and the reading
// of a tenant slug from a Host header. It does no I/O and knows no HTTP library: inputs
// are byte slices, so every function here can be fuzzed alone.
package routing

import (
	"hash/maphash"
	"strings"
)

// Table maps method + normalized path to a tenant's route (an R; the table holds *R). It
// is a tree of path segments: a lookup walks one node per segment of the request path,
// so its cost depends on the path's depth, not on how many routes the tenant has (50,000
// routes cost what one does). Nodes with many children use a map, small ones a slice
// scanned in order, and the few with thousands (a tenant's 50,000 routes side by side) a
// map split in shards by a hash of the segment, so that an Editor copies one shard, not
// all of them.
//
// Matching rules (README, "The edge"): a route path is a prefix on segment boundaries
// ("/hello" matches "/hello" and "/hello/x", not "/helloworld"); "=/hello" matches only
// "/hello"; a "{name}" segment matches any one non-empty segment ("=/users/{id}" matches
// "/users/42", not "/users" nor "/users/42/x"). The longest matching path wins; between
// paths of the same length, a literal segment beats a parameter at the first segment where
// they differ ("/users/me" beats "/users/{id}"); at the same path an exact route beats a
// prefix route, and a route listing the request's method beats one answering every
// method. A path whose routes do not take the method falls back to a shorter one, or one
// with a parameter where it had a literal, that does.
//
// Where a segment matches both a literal child and a parameter, the lookup tries both
// (the literal first), so its cost grows with the parameters that could match the path,
// still never with the routes that could not. Routes crafted so that alternatives
// multiply at every segment ("/a/a/…" beside "/{x}/a/…", "/a/{x}/…", …) could make that
// exponential in the depth: a walk enters at most visitBudget nodes and then keeps what it
// has found, a bound no table short of such a crafted one reaches.
//
// A Table is immutable once built; lookups need no lock and do not allocate.
type Table[R any] struct {
	root node[R]
	size int
}

// node is one path segment. slash is the child for an empty segment, which only a
// trailing "/" produces ("/a/" is "a" then ""); param is the child for a "{name}" segment,
// shared by every name (the names are documentation: "/a/{x}" and "/a/{y}" are one path).
type node[R any] struct {
	kids   []kid[R]
	kidMap map[string]*node[R]
	shards *kidShards[R] // above shardKidsAbove children, instead of kidMap
	slash  *node[R]
	param  *node[R]
	// The routes filed at this node, nil when none: most nodes are only on the way to
	// others, and a set is 80 bytes. Sets are never changed once in a published table:
	// an Editor changes a copy.
	exact  *methodSet[R]
	prefix *methodSet[R]
}

type kid[R any] struct {
	seg  string
	node *node[R]
}

// mapKidsAbove is the child count above which a node switches from a scanned slice to a
// map: below it a few string compares beat hashing the segment.
const mapKidsAbove = 8

// shardKidsAbove is the child count above which a node's map is split in numShards
// shards: copying a map of that size (what an Editor does to a node it changes) takes
// tens of microseconds, one of 50,000 milliseconds.
const shardKidsAbove = 1024

const numShards = 256

type kidShards[R any] [numShards]map[string]*node[R]

var shardSeed = maphash.MakeSeed()

func shardOf(seg []byte) int { return int(maphash.Bytes(shardSeed, seg) & (numShards - 1)) }

func shardOfString(seg string) int { return int(maphash.String(shardSeed, seg) & (numShards - 1)) }

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
// listed is the methods of by that are taken, kept at Add so that a 405's Allow costs no
// request anything but the one it answers.
type methodSet[R any] struct {
	any    *R
	by     [numMethods]*R
	listed Methods
	adds   uint32 // Adds filed here (Len)
}

// Methods is a set of the methods routes may list: what a 405 answer's Allow header
// names.
type Methods uint8

// allowValues is the Allow header value of each set, in the order tenants.ValidatePath's
// methods are documented.
var allowValues = func() (v [1 << numMethods][]byte) {
	names := [numMethods]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	for m := range v {
		for i, name := range names {
			if m&(1<<i) != 0 {
				if len(v[m]) > 0 {
					v[m] = append(v[m], ", "...)
				}
				v[m] = append(v[m], name...)
			}
		}
	}
	return v
}()

// Allow is the set as an Allow header value ("GET, HEAD"), shared: callers must not
// modify it. The empty set is empty.
func (m Methods) Allow() []byte { return allowValues[m] }

func (m Methods) String() string { return string(allowValues[m]) }

// methods is s.listed; none for a nil set.
func (s *methodSet[R]) methods() Methods {
	if s == nil {
		return 0
	}
	return s.listed
}

func (s *methodSet[R]) pick(mi int) *R {
	if s == nil {
		return nil
	}
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
	if n.shards != nil {
		return n.shards[shardOf(seg)][string(seg)]
	}
	return nil
}

// putChild files c under the literal segment seg of n, which must not be shared with a
// published table (see Editor). c nil removes the child.
func (n *node[R]) putChild(seg string, c *node[R]) {
	switch {
	case n.shards != nil:
		m := n.shards[shardOfString(seg)]
		if c == nil {
			delete(m, seg)
		} else {
			m[seg] = c
		}
		return
	case n.kidMap != nil:
		if c == nil {
			delete(n.kidMap, seg)
			return
		}
		n.kidMap[seg] = c
		if len(n.kidMap) > shardKidsAbove {
			n.shards = new(kidShards[R])
			for i := range n.shards {
				n.shards[i] = make(map[string]*node[R], 2*len(n.kidMap)/numShards)
			}
			for k, v := range n.kidMap {
				n.shards[shardOfString(k)][k] = v
			}
			n.kidMap = nil
		}
		return
	}
	for i := range n.kids {
		if n.kids[i].seg == seg {
			if c == nil {
				n.kids = append(n.kids[:i:i], n.kids[i+1:]...)
			} else {
				n.kids[i].node = c
			}
			return
		}
	}
	if c == nil {
		return
	}
	n.kids = append(n.kids, kid[R]{seg, c})
	if len(n.kids) > mapKidsAbove {
		n.kidMap = make(map[string]*node[R], len(n.kids))
		for _, k := range n.kids {
			n.kidMap[k.seg] = k.node
		}
		n.kids = nil
	}
}

func (n *node[R]) addChild(seg string) *node[R] {
	if seg == "" {
		if n.slash == nil {
			n.slash = &node[R]{}
		}
		return n.slash
	}
	if seg[0] == '{' { // a whole "{name}" segment: tenants.ValidatePath allows no other '{'
		if n.param == nil {
			n.param = &node[R]{}
		}
		return n.param
	}
	if c := n.child([]byte(seg)); c != nil {
		return c
	}
	c := &node[R]{}
	n.putChild(seg, c)
	return c
}

// Add files r under one of its paths (validated: "/a/b", "=/a/b", "/a/", "/a/{id}") for
// the given methods (empty: every method). When a slot is already taken the first route
// keeps it and Add returns the route that holds it; paths that differ only in their
// parameters' names take the same slots.
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
	if *set == nil {
		*set = &methodSet[R]{}
	}
	t.size++
	return (*set).add(methods, r)
}

func (set *methodSet[R]) add(methods []string, r *R) (conflict *R) {
	set.adds++
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
		set.listed |= 1 << mi
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
// trailing "/" (what strip_prefix removes: with parameters, the segments they matched
// too); nil when no route matches.
func (t *Table[R]) Lookup(method, path []byte) (*R, int) {
	mi := methodIndex(method)
	n := &t.root
	if len(path) <= 1 { // "/"
		if r := n.exact.pick(mi); r != nil {
			return r, 0
		}
		return n.prefix.pick(mi), 0
	}
	// This loop is walker.walk for nodes without a parameter child, where there is only
	// one way on, with the best match kept in registers; at the first node with one the
	// walker takes over from the same state.
	best, score, strip := n.prefix.pick(mi), 0, 0 // "/" matches everything
	pos := 1
	for n.param == nil {
		e := pos
		for e < len(path) && path[e] != '/' {
			e++
		}
		c := n.child(path[pos:e])
		if c == nil {
			return best, strip
		}
		n = c
		if e == len(path) {
			r := n.exact.pick(mi)
			if r == nil {
				r = n.prefix.pick(mi)
			}
			if r != nil {
				return r, e
			}
			return best, strip
		}
		if r := n.prefix.pick(mi); r != nil {
			best, score, strip = r, e, e
		}
		if s := n.slash; s != nil && e+1 < len(path) {
			if r := s.prefix.pick(mi); r != nil {
				best, score, strip = r, e+1, e
			}
		}
		pos = e + 1
	}
	if best == nil {
		score = -1
	}
	w := walker[R]{path: path, mi: mi, best: best, score: score, strip: strip, left: visitBudget(path)}
	w.walk(n, pos)
	return w.best, w.strip
}

// Allowed is the set of methods the routes matching path list: what a 405 answer's Allow
// names when Lookup found no route for the request's method but Allowed is not empty.
// It walks the table again, so only the request that gets the 405 pays for it.
func (t *Table[R]) Allowed(path []byte) Methods {
	w := walker[R]{path: path, allow: true, left: visitBudget(path)}
	w.start(&t.root)
	return w.methods
}

// walker is one walk of the table along a request path. A Lookup keeps the best route
// seen: score is the length of the request path its route path covers (a trailing-slash
// prefix route covers its "/" too), and only a longer one replaces it, so of two paths of
// the same length the one the walk meets first wins; the walk tries a literal child before
// the parameter, which makes that the more literal one. Allowed collects the methods of
// every matching path instead.
type walker[R any] struct {
	path    []byte
	mi      int  // the request method's index (methodIndex)
	allow   bool // collect methods (Allowed) rather than pick a route (Lookup)
	methods Methods
	best    *R
	score   int
	strip   int
	left    int // nodes the walk may still enter
}

// visitBudget is how many nodes a walk along path may enter: twice its segments, and
// some, where a path matching parameters alone enters one a segment.
func visitBudget(path []byte) int { return len(path) + 64 }

func (w *walker[R]) start(root *node[R]) {
	if len(w.path) <= 1 { // "/"
		w.end(root, 0)
		return
	}
	w.offer(root.prefix, 0, 0) // "/" matches everything
	w.walk(root, 1)
}

// walk matches the path from pos (the start of a segment) on, below n.
func (w *walker[R]) walk(n *node[R], pos int) {
	for ; w.left > 0; w.left-- {
		e := pos
		for e < len(w.path) && w.path[e] != '/' {
			e++
		}
		c := n.child(w.path[pos:e])
		if p := n.param; p != nil && e > pos {
			if c != nil && (w.allow || w.score < len(w.path)) {
				// Both match: the literal's subtree first. Once a route covers the whole
				// path nothing under the parameter can cover more.
				w.visit(c, e)
			}
			if c == nil || w.allow || w.score < len(w.path) {
				c = p
			} else {
				return
			}
		}
		if c == nil {
			return
		}
		if e == len(w.path) {
			w.end(c, e)
			return
		}
		w.through(c, e)
		n, pos = c, e+1
	}
}

// visit goes on from c, a node matching the path up to e.
func (w *walker[R]) visit(c *node[R], e int) {
	if e == len(w.path) {
		w.end(c, e)
		return
	}
	w.through(c, e)
	w.walk(c, e+1)
}

// through offers the prefix routes of n, which matches the path up to e where it goes on
// after a "/": those of n and those of its trailing-slash child ("/a/" matches "/a/b").
func (w *walker[R]) through(n *node[R], e int) {
	w.offer(n.prefix, e, e)
	if s := n.slash; s != nil && e+1 < len(w.path) {
		w.offer(s.prefix, e+1, e)
	}
}

// end offers the routes of n, which matches the whole path (e is its length): an exact
// route before a prefix one.
func (w *walker[R]) end(n *node[R], e int) {
	if w.allow {
		w.methods |= n.exact.methods() | n.prefix.methods()
		return
	}
	if e <= w.score {
		return
	}
	r := n.exact.pick(w.mi)
	if r == nil {
		r = n.prefix.pick(w.mi)
	}
	if r != nil {
		w.best, w.score, w.strip = r, e, e
	}
}

func (w *walker[R]) offer(s *methodSet[R], score, strip int) {
	if w.allow {
		w.methods |= s.methods()
		return
	}
	if score <= w.score {
		return
	}
	if r := s.pick(w.mi); r != nil {
		w.best, w.score, w.strip = r, score, strip
	}
}

// Len is the number of (path, route) entries in the table.
func (t *Table[R]) Len() int { return t.size }
