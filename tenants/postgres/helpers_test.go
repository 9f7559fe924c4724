package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// openDB gives the test its own migrated database. Upstreams on loopback are allowed, as
// in dev.
func openDB(t *testing.T) (*postgres.DB, string) {
	t.Helper()
	return pgtest.Open(t, postgres.WithUpstreamAddressRule(&tenants.UpstreamAddressRule{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}))
}

// rawConn is a direct connection for inspecting tables.
func rawConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type outboxRow struct {
	ID    int64
	Key   string
	Value []byte
	Sent  bool
}

func (r outboxRow) String() string {
	if r.Value == nil {
		return fmt.Sprintf("%d %s DELETE", r.ID, r.Key)
	}
	return fmt.Sprintf("%d %s %s", r.ID, r.Key, r.Value)
}

// outboxAfter returns the outbox rows with id > after, in id order.
func outboxAfter(t *testing.T, conn *pgx.Conn, after int64) []outboxRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT id, key, value, sent_at IS NOT NULL FROM outbox WHERE id > $1 ORDER BY id`, after)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := r.Scan(&o.ID, &o.Key, &o.Value, &o.Sent)
		return o, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func maxOutboxID(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	var id int64
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// decode checks that a row's value is a valid entry for its key with Rev = the row id.
func decode(t *testing.T, r outboxRow) *tenants.Entry {
	t.Helper()
	_, e, err := tenants.DecodeEntry(r.Key, r.Value)
	if err != nil {
		t.Fatalf("outbox row %v: %v", r, err)
	}
	if e.Rev != r.ID {
		t.Fatalf("outbox row %d: entry rev %d", r.ID, e.Rev)
	}
	return e
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := tenants.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func wantMessage(t *testing.T, err error, msg string) {
	t.Helper()
	if got := tenants.ErrorMessage(err); got != msg {
		t.Fatalf("error %v: message %q, want %q", err, got, msg)
	}
}

// checkFor polls fn until it returns nil or total has passed.
func checkFor(t *testing.T, total, sleep time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(sleep)
	}
}

// mustTenant creates a tenant on the unlimited platform plan, so tests that create many
// objects are not stopped by the resource limits of the default plan.
func mustTenant(t *testing.T, db *postgres.DB, slug string) *tenants.Tenant {
	t.Helper()
	tn := &tenants.Tenant{Slug: slug, PlatformPlan: tenants.PlatformUnlimited}
	if err := db.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("create tenant %s: %v", slug, err)
	}
	return tn
}

func newRoute(tenantID, name string, paths ...string) *tenants.Route {
	return &tenants.Route{
		TenantID: tenantID, Name: name, Paths: paths,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://127.0.0.1:9999"}}},
	}
}

func mustRoute(t *testing.T, db *postgres.DB, r *tenants.Route) *tenants.Route {
	t.Helper()
	if err := db.CreateRoute(context.Background(), r); err != nil {
		t.Fatalf("create route %s: %v", r.Name, err)
	}
	return r
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
