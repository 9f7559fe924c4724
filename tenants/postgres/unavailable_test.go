package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// bound is the store's timeout in these tests; slack is what a busy machine may add to
// it before a call counts as hanging.
const (
	bound = time.Second
	slack = 15 * time.Second
)

// proxied opens the test's database twice: directly, and through a proxy the test can cut
// and freeze, with the store's timeout at bound.
func proxied(t *testing.T) (direct, viaProxy *postgres.DB, p *pgtest.Proxy, url string) {
	t.Helper()
	direct, url = openDB(t)
	p, purl := pgtest.NewProxy(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, purl, postgres.WithTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return direct, db, p, url
}

// unavailable runs call and checks it fails as unavailable, and soon: not after the
// database comes back, which in these tests happens only once it has returned.
func unavailable(t *testing.T, what string, call func() error) {
	t.Helper()
	start := time.Now()
	err := call()
	took := time.Since(start)
	if !postgres.Unavailable(err) {
		t.Fatalf("%s: error %v (%T) is not recognized as unavailable", what, err, err)
	}
	if took > bound+slack {
		t.Fatalf("%s: returned after %v, far past the bound %v", what, took, bound)
	}
}

func TestUnavailableWhenCut(t *testing.T) {
	t.Parallel()
	_, db, p, _ := proxied(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	p.Cut()
	unavailable(t, "find", func() error { _, err := db.FindTenant(ctx, "acme"); return err })
	unavailable(t, "create", func() error { return db.CreateTenant(ctx, &tenants.Tenant{Slug: "beta", Name: "Beta"}) })
	unavailable(t, "ping", func() error { return db.Ping(ctx) })
	p.Restore()
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		_, err := db.FindTenantByID(ctx, tn.ID)
		return err
	})
}

func TestUnavailableWhenFrozen(t *testing.T) {
	t.Parallel()
	_, db, p, _ := proxied(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	p.Freeze()
	// A caller's deadline and the store's own bound (a call without deadline) both end
	// the wait: on a pooled connection, and on a new one (the pool is busy with the
	// first while a second call runs beside it).
	unavailable(t, "find with a deadline", func() error {
		cctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		_, err := db.FindTenant(cctx, "acme")
		return err
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			errs <- db.CreateTenant(cctx, &tenants.Tenant{Slug: "beta", Name: "Beta"})
		}()
	}
	for range 2 {
		unavailable(t, "create", func() error { return <-errs })
	}
	unavailable(t, "ping without a deadline", func() error { return db.Ping(ctx) })
	unavailable(t, "due domains without a deadline", func() error {
		_, err := db.DueDomains(ctx, time.Now(), time.Minute, 10)
		return err
	})
	p.Restore()
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		_, err := db.FindTenantByID(ctx, tn.ID)
		return err
	})
	if _, err := db.FindTenant(ctx, "beta"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("a create that timed out while frozen was applied: %v", err)
	}
}

// A write whose deadline expires in the middle of its transaction (here: after the
// tenant's row, waiting for the outbox's lock) leaves nothing behind: neither the row nor
// an outbox entry.
func TestTimeoutMidTransactionRollsBack(t *testing.T) {
	t.Parallel()
	direct, url := openDB(t)
	ctx := context.Background()
	db, err := postgres.Open(ctx, url, postgres.WithTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	holder := rawConn(t, url)
	before := maxOutboxID(t, holder)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, postgres.RevLockID); err != nil {
		t.Fatal(err)
	}
	unavailable(t, "create", func() error {
		cctx, cancel := context.WithTimeout(ctx, bound/2) // below the statement timeout
		defer cancel()
		return db.CreateTenant(cctx, &tenants.Tenant{Slug: "half", Name: "Half"})
	})
	// Without the caller's deadline the statement timeout ends it.
	unavailable(t, "create", func() error { return db.CreateTenant(ctx, &tenants.Tenant{Slug: "half", Name: "Half"}) })
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, postgres.RevLockID); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.FindTenant(ctx, "half"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("the tenant of a timed-out write exists: %v", err)
	}
	if rows := outboxAfter(t, holder, before); len(rows) != 0 {
		t.Fatalf("a timed-out write left outbox rows: %v", rows)
	}
	mustTenant(t, db, "half") // and the store is fine afterwards
}

func TestRelayRecoversFromCutAndFreeze(t *testing.T) {
	t.Parallel()
	direct, db, p, url := proxied(t)
	conn := rawConn(t, url)
	tn := mustTenant(t, direct, "acme")
	pub := &recorder{}
	start(t, newRelay(t, db, pub, 100))
	waitSent(t, conn)
	for _, fault := range []struct {
		name string
		do   func()
	}{{"cut", p.Cut}, {"freeze", p.Freeze}} {
		fault.do()
		// Changes made meanwhile (through the direct store) wait in the outbox...
		churn(t, direct, tn.ID, 3)
		time.Sleep(2 * bound) // the relay's calls time out meanwhile
		p.Restore()
		// ...and are published once the relay's database answers again.
		waitSent(t, conn)
		wantPublishedExactly(t, pub, allRows(t, conn))
	}
}

func TestUnavailableClassifies(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("closed pool"), false},
		{fmt.Errorf("postgres: find tenant: %w", &pgconn.PgError{Code: "23505"}), false},
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table: a bug
		{&pgconn.PgError{Code: "28P01"}, false}, // wrong password: a configuration error
		{fmt.Errorf("postgres: find tenant: %w", &pgconn.PgError{Code: "57014"}), true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "57P03"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "53300"}, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("x: %w", refused), true},
		{fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
	} {
		if got := postgres.Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A process starting while its database is frozen is not held at the migrations for good.
func TestMigrateWhileFrozen(t *testing.T) {
	t.Parallel()
	_, url := openDB(t)
	p, purl := pgtest.NewProxy(t, url)
	p.Freeze()
	start := time.Now()
	err := postgres.Migrate(context.Background(), purl)
	if !postgres.Unavailable(err) {
		t.Fatalf("migrate: error %v is not recognized as unavailable", err)
	}
	if took := time.Since(start); took > postgres.DefaultTimeout+slack {
		t.Fatalf("migrate returned after %v, far past the connect timeout %v", took, postgres.DefaultTimeout)
	}
}
