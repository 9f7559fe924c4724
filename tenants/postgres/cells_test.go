package postgres_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// cellKeys are the keys of the bucket that belong to tenantID.
func cellKeys(t *testing.T, kv jetstream.KeyValue, tenantID string) []string {
	t.Helper()
	var keys []string
	for k := range bucketEntries(t, kv) {
		if strings.HasPrefix(k, tenantID+".") {
			keys = append(keys, k)
		}
	}
	return keys
}

// sameAsPostgresCell is sameAsPostgres for the share of the entries that goes to cell.
func sameAsPostgresCell(t *testing.T, db *postgres.DB, kv jetstream.KeyValue, cell string) error {
	t.Helper()
	want := map[string]string{}
	if _, err := db.Entries(context.Background(), func(c tenants.Change) error {
		if c.Cell == cell {
			want[c.Key] = withoutRev(c.Value)
		}
		return nil
	}); err != nil {
		return err
	}
	have := bucketEntries(t, kv)
	for k, v := range have {
		w, ok := want[k]
		if !ok {
			return fmt.Errorf("cell %s's bucket holds %s, which names no object of the cell", cell, k)
		}
		if got := withoutRev(v); got != w {
			return fmt.Errorf("cell %s's %s:\n%s\npostgres:\n%s", cell, k, got, w)
		}
	}
	if len(have) != len(want) {
		return fmt.Errorf("cell %s's bucket holds %d keys, postgres %d objects", cell, len(have), len(want))
	}
	return nil
}

// TestCellsOnOneNATS: two cells on one NATS, each with its own bucket. A tenant's
// entries go to its cell's bucket only; a move puts them all in the new bucket before it
// deletes them from the old one, in one transaction with its audit entry; a resync puts
// right each bucket, a key its tenant left behind included.
func TestCellsOnOneNATS(t *testing.T) {
	t.Parallel()
	db, url := pgtest.Open(t, postgres.WithCells([]string{"default", "b"}), postgres.WithUpstreamAddressRule(&tenants.UpstreamAddressRule{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}))
	conn := rawConn(t, url)
	ctx := context.Background()

	nc, err := natsconn.Connect(testenv.NATS(t).ClientURL(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name("tgcells_")
	kvs := map[string]jetstream.KeyValue{}
	pubs := map[string]*tgnats.Publisher{}
	for _, cell := range []string{"default", "b"} {
		bucket := prefix + "_" + cell
		if kvs[cell], err = tgnats.EnsureBucket(ctx, js, bucket, 1); err != nil {
			t.Fatal(err)
		}
		if pubs[cell], err = tgnats.NewPublisher(nc, bucket, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := postgres.NewRelay(db, tgnats.NewCellPublisher(pubs), testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, 200*time.Millisecond, 7)
	start(t, r)

	// Placement: the cell with the fewest tenants, the first declared on a tie; or the
	// one the create names.
	a := mustTenant(t, db, "a")
	b := mustTenant(t, db, "b")
	if a.Cell != "default" || b.Cell != "b" {
		t.Fatalf("placed a in %q, b in %q", a.Cell, b.Cell)
	}
	pinned := &tenants.Tenant{Slug: "pinned", PlatformPlan: tenants.PlatformUnlimited, Cell: "b"}
	if err := db.CreateTenant(ctx, pinned); err != nil || pinned.Cell != "b" {
		t.Fatalf("pinned: %v, cell %q", err, pinned.Cell)
	}
	if err := db.CreateTenant(ctx, &tenants.Tenant{Slug: "nowhere", Cell: "c"}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("create in an undeclared cell: %v", err)
	}
	churn(t, db, a.ID, 6)
	churn(t, db, b.ID, 6)
	route := mustRoute(t, db, newRoute(b.ID, "only-b", "/only-b"))
	waitSent(t, conn)
	for _, cell := range []string{"default", "b"} {
		if err := sameAsPostgresCell(t, db, kvs[cell], cell); err != nil {
			t.Fatal(err)
		}
	}
	routeKey := tenants.ObjectKey(b.ID, tenants.KindRoute, route.ID)
	if _, err := kvs["b"].Get(ctx, routeKey); err != nil {
		t.Fatalf("b's route in b's bucket: %v", err)
	}
	if _, err := kvs["default"].Get(ctx, routeKey); err == nil {
		t.Fatal("b's route is in the default cell's bucket")
	}
	if len(cellKeys(t, kvs["default"], b.ID)) != 0 || len(cellKeys(t, kvs["b"], a.ID)) != 0 {
		t.Fatal("a tenant's keys are in the other cell's bucket")
	}

	// The move: puts for the new cell first, then deletes for the old one, in one
	// transaction with its audit entry.
	before := maxOutboxID(t, conn)
	inB := len(cellKeys(t, kvs["b"], b.ID))
	moved, err := db.MoveTenant(audit(b.ID, "cells.update", ""), b.ID, "default")
	if err != nil {
		t.Fatal(err)
	}
	if moved.Cell != "default" || moved.Version != b.Version+1 {
		t.Fatalf("moved: cell %q, version %d (was %d)", moved.Cell, moved.Version, b.Version)
	}
	rows, err := conn.Query(ctx, `SELECT cell, value IS NULL FROM outbox WHERE id > $1 ORDER BY id`, before)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for rows.Next() {
		var cell string
		var isDel bool
		if err := rows.Scan(&cell, &isDel); err != nil {
			t.Fatal(err)
		}
		op := "put"
		if isDel {
			op = "del"
		}
		if len(seq) == 0 || seq[len(seq)-1] != op+" "+cell {
			seq = append(seq, op+" "+cell)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(seq, ", ") != "put default, del b" {
		t.Fatalf("the move's outbox rows: %v", seq)
	}
	waitSent(t, conn)
	if got := cellKeys(t, kvs["b"], b.ID); len(got) != 0 {
		t.Fatalf("after the move, the old cell still holds %v", got)
	}
	if got := cellKeys(t, kvs["default"], b.ID); len(got) != inB {
		t.Fatalf("after the move, the new cell holds %d keys of the tenant, the old one held %d", len(got), inB)
	}
	for _, cell := range []string{"default", "b"} {
		if err := sameAsPostgresCell(t, db, kvs[cell], cell); err != nil {
			t.Fatal(err)
		}
	}
	if log := auditLog(t, db, b.ID); !strings.Contains(strings.Join(log, "\n"), "cells.update  ann@example.com") {
		t.Fatalf("audit log: %v", log)
	}
	// A move to the cell the tenant is in changes nothing; to an undeclared one is refused.
	same := maxOutboxID(t, conn)
	if again, err := db.MoveTenant(ctx, b.ID, "default"); err != nil || again.Version != moved.Version {
		t.Fatalf("move in place: %v, %+v", err, again)
	}
	if maxOutboxID(t, conn) != same {
		t.Fatal("a move in place wrote to the outbox")
	}
	if _, err := db.MoveTenant(ctx, b.ID, "c"); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("move to an undeclared cell: %v", err)
	}
	// Later changes follow the tenant to its new cell, and so does its deletion.
	later := mustRoute(t, db, newRoute(b.ID, "later", "/later"))
	if err := db.DeleteTenant(ctx, pinned.ID); err != nil {
		t.Fatal(err)
	}
	waitSent(t, conn)
	if _, err := kvs["default"].Get(ctx, tenants.ObjectKey(b.ID, tenants.KindRoute, later.ID)); err != nil {
		t.Fatalf("a route made after the move: %v", err)
	}
	for _, cell := range []string{"default", "b"} {
		if err := sameAsPostgresCell(t, db, kvs[cell], cell); err != nil {
			t.Fatal(err)
		}
	}
	if cells, err := db.ListCells(ctx); err != nil || len(cells) != 2 || cells[0].Tenants != 2 || cells[1].Tenants != 0 {
		t.Fatalf("cells: %v, %+v", err, cells)
	}

	// A key the move left behind (its delete lost) and a key lost from the new cell: a
	// resync of the cells repairs both buckets.
	stray := tenants.ObjectKey(b.ID, tenants.KindRoute, route.ID)
	if _, err := kvs["b"].Put(ctx, stray, []byte(`{"rev":1,"route":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := kvs["default"].Delete(ctx, tenants.TenantKey(a.ID)); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := r.Resync(rctx, func(ctx context.Context, live []tenants.Change) error {
		return tgnats.ResyncCells(ctx, kvs, live)
	}); err != nil {
		t.Fatal(err)
	}
	for _, cell := range []string{"default", "b"} {
		if err := sameAsPostgresCell(t, db, kvs[cell], cell); err != nil {
			t.Fatalf("after resync: %v", err)
		}
	}
	// The relay's publisher refuses a cell it does not know, before sending anything.
	err = tgnats.NewCellPublisher(pubs).Publish(ctx, []tenants.Change{{Rev: 1, Key: tenants.TenantKey(a.ID), Cell: "c"}})
	if err == nil || !strings.Contains(err.Error(), `cell "c" is not declared`) {
		t.Fatalf("unknown cell: %v", err)
	}
	// The api refuses to start while a tenant is in a cell it does not declare.
	solo, soloURL := pgtest.Open(t)
	tn := mustTenant(t, solo, "x")
	if err := solo.CheckCells(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := rawConn(t, soloURL)
	if _, err := c2.Exec(ctx, `UPDATE tenants SET cell = 'gone' WHERE id = $1`, tn.ID); err != nil {
		t.Fatal(err)
	}
	if err := solo.CheckCells(ctx); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("check cells: %v", err)
	}
}
