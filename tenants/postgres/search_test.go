package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"tollgate/tenants"
)

// searchAll pages through SearchRoutes two at a time and returns the names in order.
func searchAll(t *testing.T, search func(tenants.Page) ([]*tenants.Route, string, error)) []string {
	t.Helper()
	var names []string
	p := tenants.Page{Limit: 2}
	for i := 0; ; i++ {
		page, next, err := search(p)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(page) > 2 || next != "" && len(page) != 2 {
			t.Fatalf("page %d: %d routes, next %q", i, len(page), next)
		}
		for _, r := range page {
			names = append(names, r.Name)
		}
		if next == "" {
			return names
		}
		p.Cursor = next
	}
}

// A name prefix finds the tenant's routes whose names start with it, bytewise and case
// sensitive, in bytewise order, page by page; LIKE's wildcards are plain characters.
func TestSearchRoutes(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn, other := mustTenant(t, db, "searched"), mustTenant(t, db, "neighbour")
	names := []string{"alpha", "alpha-2", "alphabet", "Alpha", "al", "alp%", "alp_x", "beta", "é-route", "éa", "e"}
	for i, n := range names {
		mustRoute(t, db, newRoute(tn.ID, n, fmt.Sprintf("/r%d", i)))
	}
	mustRoute(t, db, newRoute(other.ID, "alpha-other", "/x"))

	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"alp", []string{"alp%", "alp_x", "alpha", "alpha-2", "alphabet"}},
		{"alp%", []string{"alp%"}},
		{"alpha", []string{"alpha", "alpha-2", "alphabet"}},
		{"é", []string{"é-route", "éa"}},
		{"A", []string{"Alpha"}},
		{"", []string{"Alpha", "al", "alp%", "alp_x", "alpha", "alpha-2", "alphabet", "beta", "e", "é-route", "éa"}},
		{"gamma", nil},
	} {
		got := searchAll(t, func(p tenants.Page) ([]*tenants.Route, string, error) {
			return db.SearchRoutes(ctx, tn.ID, tc.prefix, p)
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("prefix %q: got %q, want %q", tc.prefix, got, tc.want)
		}
	}

	// A cursor that is not this search's is refused, not read as some other place.
	_, next, err := db.SearchRoutes(ctx, tn.ID, "alp", tenants.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	_, _, err = db.SearchRoutes(ctx, tn.ID, "beta", tenants.Page{Cursor: next})
	wantCode(t, err, tenants.EInvalidRequest)
	_, _, err = db.SearchRoutes(ctx, tn.ID, "alp", tenants.Page{Cursor: "not a cursor!"})
	wantCode(t, err, tenants.EInvalidRequest)
	if got, _, err := db.SearchRoutes(ctx, "not-an-id", "alp", tenants.Page{}); err != nil || len(got) != 0 {
		t.Errorf("unknown tenant: %d routes, %v", len(got), err)
	}
}

// RouteNames and ConsumerNames name the tenant's own objects among the ids asked, and
// nothing else: another tenant's id and an id that is not one are left out.
func TestObjectNames(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn, other := mustTenant(t, db, "named"), mustTenant(t, db, "stranger")
	a := mustRoute(t, db, newRoute(tn.ID, "a", "/a"))
	b := mustRoute(t, db, newRoute(tn.ID, "b", "/b"))
	theirs := mustRoute(t, db, newRoute(other.ID, "theirs", "/a"))
	got, err := db.RouteNames(ctx, tn.ID, []string{a.ID, b.ID, theirs.ID, "junk", a.ID})
	if err != nil || len(got) != 2 || got[a.ID] != "a" || got[b.ID] != "b" {
		t.Errorf("route names: %v, %v", got, err)
	}

	cs := &tenants.Consumer{TenantID: tn.ID, Name: "mobile"}
	if err := db.CreateConsumer(ctx, cs); err != nil {
		t.Fatal(err)
	}
	got, err = db.ConsumerNames(ctx, tn.ID, []string{cs.ID, a.ID})
	if err != nil || len(got) != 1 || got[cs.ID] != "mobile" {
		t.Errorf("consumer names: %v, %v", got, err)
	}
	if got, err := db.ConsumerNames(ctx, tn.ID, nil); err != nil || len(got) != 0 {
		t.Errorf("no ids: %v, %v", got, err)
	}
	_, err = db.RouteNames(ctx, tn.ID, make([]string, tenants.MaxPageLimit+1))
	wantCode(t, err, tenants.EInvalidRequest)
}
