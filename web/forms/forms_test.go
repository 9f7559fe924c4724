package forms_test

import (
	"testing"
	"time"

	"tollgate/web/forms"
)

// TestStore: a kept page is taken once, by its path, oldest first; it expires; one
// browser's queue is bounded.
func TestStore(t *testing.T) {
	f := forms.Store[int]{PerKey: 8}
	now := time.Now()
	keep := func(key, path string, status int) {
		f.Put(key, forms.Kept[int]{Path: path, Status: status, Expires: now.Add(time.Minute)}, now)
	}
	keep("s:a", "/x", 401)
	keep("s:a", "/x", 429)
	keep("s:a", "/y", 422)
	if _, ok := f.Take("s:b", "/x", now); ok {
		t.Fatal("another browser took the page")
	}
	for _, want := range []int{401, 429} {
		if r, ok := f.Take("s:a", "/x", now); !ok || r.Status != want {
			t.Fatalf("take /x: %v %d, want %d", ok, r.Status, want)
		}
	}
	if _, ok := f.Take("s:a", "/x", now); ok {
		t.Fatal("a page was taken twice")
	}
	if _, ok := f.Take("s:a", "/y", now.Add(2*time.Minute)); ok {
		t.Fatal("an expired page was taken")
	}
	for i := range 8 + 10 {
		keep("s:c", "/z", i)
	}
	if r, _ := f.Take("s:c", "/z", now); r.Status != 10 {
		t.Fatalf("bounded queue: first kept %d, want 10", r.Status)
	}
}

// TestStoreBounded: past Max, the expired go first, then everything.
func TestStoreBounded(t *testing.T) {
	f := forms.Store[int]{Max: 4}
	now := time.Now()
	f.Put("a", forms.Kept[int]{Path: "/", Expires: now.Add(-time.Second)}, now)
	for i := range 3 {
		f.Put(string(rune('b'+i)), forms.Kept[int]{Path: "/", Expires: now.Add(time.Minute)}, now)
	}
	f.Put("f", forms.Kept[int]{Path: "/", Expires: now.Add(time.Minute)}, now) // prunes "a"
	if f.Len() != 4 {
		t.Fatalf("%d kept, want 4 (the expired one dropped)", f.Len())
	}
	f.Put("g", forms.Kept[int]{Path: "/", Expires: now.Add(time.Minute)}, now) // all live: all go
	if f.Len() != 1 {
		t.Fatalf("%d kept, want 1", f.Len())
	}
}
