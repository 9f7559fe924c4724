package main

import (
	"slices"
	"strings"
	"testing"

	"tollgate/e2e/bench/tenantscale"
)

func TestIntList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		err  bool
	}{
		{in: "10000", want: []int{10000}},
		{in: "10000, 100_000", want: []int{10000, 100000}},
		{in: "5000,50000,", want: []int{5000, 50000}},
		{in: "", err: true},
		{in: "0", err: true},
		{in: "-5", err: true},
		{in: "ten", err: true},
	} {
		var l intList
		err := l.Set(c.in)
		if (err != nil) != c.err {
			t.Errorf("Set(%q): error %v, want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && !slices.Equal(l, c.want) {
			t.Errorf("Set(%q) = %v, want %v", c.in, l, c.want)
		}
	}
	l := intList{5000, 50000}
	if got := l.String(); got != "5000,50000" {
		t.Errorf("String() = %q", got)
	}
}

func TestRouteSetSpread(t *testing.T) {
	rr := &routeSet{slugs: []string{"a", "b", "c"}}
	if got := []string{rr.slugOf(0), rr.slugOf(1), rr.slugOf(2), rr.slugOf(3)}; !slices.Equal(got, []string{"a", "b", "c", "a"}) {
		t.Errorf("round-robin: %v", got)
	}
	blocks := &routeSet{slugs: []string{"a", "b"}, per: 2}
	if got := []string{blocks.slugOf(0), blocks.slugOf(1), blocks.slugOf(2), blocks.slugOf(3)}; !slices.Equal(got, []string{"a", "a", "b", "b"}) {
		t.Errorf("blocks: %v", got)
	}
	if got := rr.hostOf(4); got != "b.localhost" {
		t.Errorf("hostOf(4) = %q", got)
	}
}

func TestScaleSettingsCheck(t *testing.T) {
	ok := func() scaleSettings {
		return scaleSettings{rssRoutes: intList{10000}, hotRoutes: intList{5000, 50000}, hotTenants: intList{1, 1000},
			hotN: 100, hotRate: 1000, coldRoutes: 100000, coldTenants: 10, coldRuns: 3,
			tenants: tenantscale.Settings{Tenants: 1000, Routes: 10, Posts: 10000, Clients: 16, Sample: 200, Changes: 20}}
	}
	def := ok()
	if err := def.check(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, c := range map[string]struct {
		edit func(*scaleSettings)
		want string
	}{
		"cold in one tenant":       {func(c *scaleSettings) { c.coldTenants = 1 }, "at most 50000 routes per tenant"},
		"more tenants than routes": {func(c *scaleSettings) { c.coldRoutes, c.coldTenants = 5, 6 }, "-cold-tenants"},
		"hot in one tenant":        {func(c *scaleSettings) { c.hotRoutes = intList{60000} }, "a tenant holds at most 50000"},
		"no changes":               {func(c *scaleSettings) { c.hotN = 0 }, "-hot-n"},
		"no cold runs":             {func(c *scaleSettings) { c.coldRuns = 0 }, "-cold-runs"},
		"scale of few tenants":     {func(c *scaleSettings) { c.tenants.Tenants = 5 }, "-scale-tenants"},
	} {
		c2 := ok()
		c.edit(&c2)
		err := c2.check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}
