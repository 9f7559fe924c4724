package extauth_test

import (
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge/extauth"
)

func TestCacheBudgets(t *testing.T) {
	var total, tenant atomic.Int64
	b := extauth.Budget{Tenant: &tenant, Total: &total, MaxTenant: 3, MaxTotal: 100}
	c1, c2 := extauth.NewCache(b), extauth.NewCache(b)
	now := time.Now().UnixNano()
	key := func(i byte) [32]byte {
		var k [32]byte
		k[0], k[31] = i*2, i // distinct slots
		return k
	}
	put := func(c *extauth.Cache, i byte) {
		c.Put(&extauth.Verdict{Key: key(i), Expires: now + int64(time.Minute)}, now)
	}
	for i := byte(0); i < 5; i++ {
		put(c1, i)
	}
	put(c2, 9)
	if tenant.Load() != 3 || total.Load() != 3 {
		t.Fatalf("per tenant budget 3: tenant %d total %d", tenant.Load(), total.Load())
	}
	c1.Drop()
	if tenant.Load() != 0 || total.Load() != 0 {
		t.Fatalf("after drop: tenant %d total %d", tenant.Load(), total.Load())
	}
	put(c1, 1) // a dropped cache takes nothing
	if total.Load() != 0 || c1.Get(&[32]byte{2, 31: 1}, now) != nil {
		t.Fatal("a dropped cache kept an answer")
	}
	small := extauth.NewCache(extauth.Budget{Tenant: &tenant, Total: &total, MaxTenant: 3, MaxTotal: 1})
	put(small, 1)
	put(small, 2) // over the edge's budget
	if tenant.Load() != 1 || total.Load() != 1 {
		t.Fatalf("edge budget 1: tenant %d total %d", tenant.Load(), total.Load())
	}
	// The same key again replaces without counting twice; an expired entry is not served.
	k := key(1)
	small.Put(&extauth.Verdict{Key: k, Expires: now + 1}, now)
	if total.Load() != 1 || small.Get(&k, now) == nil || small.Get(&k, now+1) != nil {
		t.Fatalf("replace or expiry wrong: total %d", total.Load())
	}
	// Two keys of one slot pair both fit; a third replaces the one expiring first.
	pair := func(i byte, exp int64) [32]byte {
		var k [32]byte
		k[0], k[31] = 100, i
		small.Put(&extauth.Verdict{Key: k, Expires: exp}, now)
		return k
	}
	var big atomic.Int64
	small = extauth.NewCache(extauth.Budget{Tenant: &big, Total: &big, MaxTenant: 100, MaxTotal: 100})
	k1, k2 := pair(1, now+10), pair(2, now+20)
	k3 := pair(3, now+30)
	if small.Get(&k1, now) != nil || small.Get(&k2, now) == nil || small.Get(&k3, now) == nil {
		t.Fatal("eviction did not take the entry expiring first")
	}
}
