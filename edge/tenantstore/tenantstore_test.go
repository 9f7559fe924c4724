package tenantstore

import (
	"testing"
)

func openT(t *testing.T, dir, bucket string) *Store {
	t.Helper()
	s, _, err := Open(Options{Dir: dir, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entries(t *testing.T, s *Store, id string) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err := s.Tenant(id, func(k string, v []byte) { got[k] = string(v) }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestStoreKeepsEntriesRevsAndItsRevision: what a store holds survives a reopen, a
// tenant's scan sees its own entries only (not those of a tenant whose id extends its),
// deletes keep their rev, and a deleted tenant leaves its tombstone.
func TestStoreKeepsEntriesRevsAndItsRevision(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, "b_config")
	s.Put("t1.tenant", 1, []byte(`{"rev":1}`), false)
	s.Put("t1.route.r1", 2, []byte(`{"rev":2}`), false)
	s.Put("t1.domain.d1", 3, []byte(`{"rev":3}`), true)
	s.Put("t10.route.r1", 4, []byte(`{"rev":4}`), false)
	s.SetIndex("t1", "one", 3)
	if err := s.Written(7, false); err != nil {
		t.Fatal(err)
	}
	// Reads see the batch before it is committed.
	if rev, size, ok := s.Held("t1.route.r1"); !ok || rev != 2 || size != 9 {
		t.Fatalf("held: %d %d %v", rev, size, ok)
	}
	if got := entries(t, s, "t1"); len(got) != 3 || got["t1.route.r1"] != `{"rev":2}` {
		t.Fatalf("t1's entries: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openT(t, dir, "b_config")
	if s.Seq() != 7 || s.At().IsZero() {
		t.Fatalf("revision after reopen: %d at %v", s.Seq(), s.At())
	}
	s.Delete("t1.route.r1", 2)
	if rev, size, ok := s.Held("t1.route.r1"); !ok || rev != 2 || size != 0 {
		t.Fatalf("deleted entry: %d %d %v", rev, size, ok)
	}
	var domains []string
	_ = s.Domains(func(k string, _ []byte) { domains = append(domains, k) })
	var index []string
	_ = s.Index(func(id, slug string, rev int64) { index = append(index, id+"="+slug) })
	if len(domains) != 1 || len(index) != 1 || index[0] != "t1=one" {
		t.Fatalf("domains %v, index %v", domains, index)
	}
	s.DeleteTenant("t1", 1)
	if got := entries(t, s, "t1"); len(got) != 0 {
		t.Fatalf("entries of a deleted tenant: %v", got)
	}
	if got := entries(t, s, "t10"); len(got) != 1 {
		t.Fatalf("t10's entries after t1's deletion: %v", got)
	}
	if s.Tomb("t1") != 1 || s.Tomb("t10") != 0 {
		t.Fatalf("tombs: %d %d", s.Tomb("t1"), s.Tomb("t10"))
	}
	if err := s.Written(9, true); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	// Another bucket's store is discarded.
	s, why, err := Open(Options{Dir: dir, Bucket: "other_config"})
	if err != nil || why == "" || s.Seq() != 0 {
		t.Fatalf("another bucket's store: %q, seq %v, %v", why, s.Seq(), err)
	}
	_ = s.Close()
}
