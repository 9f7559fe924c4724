package web

import (
	"errors"
	"testing"

	"tollgate/tenants"
)

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
