// Package pgtest gives a test its own migrated Tollgate database, for the tests of
// packages that stand on the Postgres store (the console, the api, the domain checks).
package pgtest

import (
	"context"
	"testing"
	"time"

	"tollgate/infra/testenv"
	"tollgate/tenants/postgres"
)

// Open creates a database for tb (dropped when it ends), migrates it and opens the store
// on it with opts; it returns the store and the database's URL.
func Open(tb testing.TB, opts ...postgres.Option) (*postgres.DB, string) {
	tb.Helper()
	url := testenv.Postgres(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, url); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	db, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(db.Close)
	return db, url
}
