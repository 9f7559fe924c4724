package postgres_test

import (
	"context"
	"testing"

	"tollgate/tenants"
)

// Paths that differ only in their parameters' names are one path: they conflict as the
// same path would, and the message names the path as the new route spells it.
func TestRouteParamConflicts(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")

	user := newRoute(tn.ID, "user", "=/users/{id}", "/shops/{shop}/items")
	user.Methods = []string{"GET"}
	mustRoute(t, db, user)

	dup := newRoute(tn.ID, "dup", "/x", "=/users/{uid}")
	dup.Methods = []string{"POST", "GET"}
	err := db.CreateRoute(ctx, dup)
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `path =/users/{uid} (GET) is already served by route "user"`)

	shop := newRoute(tn.ID, "shop", "/shops/{s}/items")
	shop.Methods = []string{"GET"}
	err = db.CreateRoute(ctx, shop)
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `path /shops/{s}/items (GET) is already served by route "user"`)

	// Another method, the prefix form, a literal where the parameter was: distinct claims.
	post := newRoute(tn.ID, "post-user", "=/users/{uid}")
	post.Methods = []string{"POST"}
	mustRoute(t, db, post)
	mustRoute(t, db, newRoute(tn.ID, "user-tree", "/users/{id}"))
	mustRoute(t, db, newRoute(tn.ID, "me", "=/users/me"))

	// One route may not list one path twice under two names either.
	wantCode(t, db.CreateRoute(ctx, newRoute(tn.ID, "twice", "/a/{x}", "/a/{y}")), tenants.EValidation)
}
