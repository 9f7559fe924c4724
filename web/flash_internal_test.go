package web

import (
	"testing"
	"time"
)

// TestFlashes: a kept page is taken once, by its path, oldest first; it expires; one
// browser's queue is bounded.
func TestFlashes(t *testing.T) {
	var f flashes
	now := time.Now()
	f.put("s:a", replay{path: "/x", status: 401, expires: now.Add(time.Minute)}, now)
	f.put("s:a", replay{path: "/x", status: 429, expires: now.Add(time.Minute)}, now)
	f.put("s:a", replay{path: "/y", status: 422, expires: now.Add(time.Minute)}, now)
	if _, ok := f.take("s:b", "/x", now); ok {
		t.Fatal("another browser took the page")
	}
	for _, want := range []int{401, 429} {
		if r, ok := f.take("s:a", "/x", now); !ok || r.status != want {
			t.Fatalf("take /x: %v %d, want %d", ok, r.status, want)
		}
	}
	if _, ok := f.take("s:a", "/x", now); ok {
		t.Fatal("a page was taken twice")
	}
	if _, ok := f.take("s:a", "/y", now.Add(2*time.Minute)); ok {
		t.Fatal("an expired page was taken")
	}
	for i := range flashPerKey + 10 {
		f.put("s:c", replay{path: "/z", status: i, expires: now.Add(time.Minute)}, now)
	}
	if r, _ := f.take("s:c", "/z", now); r.status != 10 || len(f.byKey["s:c"]) != flashPerKey-1 {
		t.Fatalf("bounded queue: first %d, left %d", r.status, len(f.byKey["s:c"]))
	}
}
