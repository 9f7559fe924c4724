package web

import (
	"errors"
	"testing"
	"time"

	"tollgate/tenants"
)

func TestLoginLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewLoginLimiter(LoginLimits{PerIP: 4, PerAccount: 2, Window: time.Minute})
	l.now = func() time.Time { return now }
	// Two failures lock the account, from any address.
	for i := 0; i < 2; i++ {
		if w := l.Allow("10.0.0.1", "a@example.com"); w != 0 {
			t.Fatalf("attempt %d refused", i+1)
		}
		l.Failed("a@example.com")
	}
	if w := l.Allow("10.0.0.2", "a@example.com"); w <= 0 || w > time.Minute {
		t.Fatalf("third attempt on a locked account: wait %v", w)
	}
	// Another account from the first address still works, until the address's budget ends.
	if l.Allow("10.0.0.1", "b@example.com") != 0 || l.Allow("10.0.0.1", "b@example.com") != 0 {
		t.Fatal("other account refused")
	}
	if l.Allow("10.0.0.1", "c@example.com") == 0 {
		t.Fatal("fifth attempt from one address allowed")
	}
	// The window passes; a success clears the account.
	now = now.Add(time.Minute)
	if l.Allow("10.0.0.1", "a@example.com") != 0 {
		t.Fatal("refused after the window")
	}
	l.Failed("a@example.com")
	l.Succeeded("a@example.com")
	if l.Allow("10.0.0.3", "a@example.com") != 0 || l.Allow("10.0.0.3", "a@example.com") != 0 {
		t.Fatal("success did not clear the account's failures")
	}
}

func TestFieldError(t *testing.T) {
	alias := map[string]string{"rate_limit": "rate_limit"}
	for _, c := range []struct {
		err        error
		field, msg string
	}{
		{tenants.Invalid("upstream.targets[1].url", "must be an http:// or https:// URL"), "upstream", "Line 2: must be an http:// or https:// URL"},
		{tenants.Invalid("paths[0]", "must start with /"), "paths", "Line 1: must start with /"},
		{tenants.Invalid("rate_limit.burst", "must be 1–1000000"), "rate_limit", "burst: must be 1–1000000"},
		{tenants.Invalid("name", "is required"), "name", "is required"},
		{tenants.Errorf(tenants.EConflict, "a route already has that name"), "form", "a route already has that name"},
	} {
		into := map[string]string{}
		if !fieldError(c.err, into, alias) || into[c.field] != c.msg {
			t.Errorf("%v → %v, want %s: %q", c.err, into, c.field, c.msg)
		}
	}
	if fieldError(errors.New("boom"), map[string]string{}, nil) {
		t.Error("a plain error is not a field error")
	}
}
