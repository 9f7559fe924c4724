package accessrules

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// decisionCache remembers Allow's answers by (subjects, method, path).
//
// It is a two-way set-associative array of atomic pointers to immutable entries, each
// holding its whole key: a hit is a byte-for-byte key match, found with two atomic loads
// and no lock or allocation; an insert takes a free way or replaces one, so the cache is
// bounded by construction and needs no eviction pass. The index is a keyed hash (seeded
// per Enforcer), so clients cannot aim at a set. The array is allocated on first use:
// tenants that never call Allow pay nothing.
//
// An Enforcer never changes, so an entry is never stale; new access rules are a new Enforcer.
type decisionCache struct {
	size  int // slots, a power of two; 0 means cacheSlots
	once  sync.Once
	seed  maphash.Seed
	slots []atomic.Pointer[decision]
	mask  uint64
}

type decision struct {
	key   string
	allow bool
}

// cacheSlots is the number of decisions an Enforcer keeps per request;
// classSlots the number it keeps per request class (see Enforcer.decide).
const (
	cacheSlots = 4096
	classSlots = 1024
)

func (c *decisionCache) init() {
	c.once.Do(func() {
		if c.size == 0 {
			c.size = cacheSlots
		}
		c.seed = maphash.MakeSeed()
		c.slots = make([]atomic.Pointer[decision], c.size)
		c.mask = uint64(c.size - 1)
	})
}

func (c *decisionCache) get(key []byte) (allow, ok bool) {
	c.init()
	h := maphash.Bytes(c.seed, key)
	i := h & c.mask &^ 1
	for _, d := range [2]*decision{c.slots[i].Load(), c.slots[i+1].Load()} {
		if d != nil && d.key == string(key) {
			return d.allow, true
		}
	}
	return false, false
}

func (c *decisionCache) put(key []byte, allow bool) {
	c.init()
	h := maphash.Bytes(c.seed, key)
	i := h & c.mask &^ 1
	d := &decision{key: string(key), allow: allow}
	switch {
	case c.slots[i].Load() == nil:
		c.slots[i].Store(d)
	case c.slots[i+1].Load() == nil:
		c.slots[i+1].Store(d)
	default:
		c.slots[i+(h>>32)&1].Store(d) // either way, by a hash bit
	}
}

// appendKey encodes a request injectively — every part length-prefixed, so no choice of
// subject strings can make two requests share a key. ok is false when the key would be
// longer than maxKeyLen (the request is then decided without the cache).
// path may also be a class's match bits.
func appendKey(dst []byte, subjects []string, method, path []byte) ([]byte, bool) {
	n := len(method) + len(path) + 8
	for _, s := range subjects {
		n += len(s) + 3
	}
	if n > maxKeyLen {
		return dst, false
	}
	dst = binary.AppendUvarint(dst, uint64(len(method)))
	dst = append(dst, method...)
	dst = binary.AppendUvarint(dst, uint64(len(path)))
	dst = append(dst, path...)
	for _, s := range subjects {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst, true
}
