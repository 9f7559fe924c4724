// Package postgres stores Tollgate's tenants, routes, consumers, keys, plans and
// management tokens in PostgreSQL, and relays every config change to the edges through a
// transactional outbox.
//
// Every write is one transaction that also inserts the outbox rows of the KV entries it
// changes (see tenants.Entry), and the audit entry its caller attached (tenants.WithAudit),
// so a change, its fan-out and its audit entry are committed together or not at all. The Relay publishes those rows in order and marks them sent; only one relay per
// database is active at a time. Nothing outside the api process may import this package:
// edges read the KV bucket, never Postgres.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"tollgate/tenants"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Advisory lock ids, in the database's own lock space (advisory locks are per database).
const (
	// relayLockID is held for its whole session by the one active relay.
	relayLockID int64 = 0x546f6c6c_00000001
	// writerLockID is taken shared by every write transaction and exclusive, briefly, by a
	// resync snapshot, so the snapshot's revs are above every committed change and below
	// every later one.
	writerLockID int64 = 0x546f6c6c_00000002
	// revLockID is taken shared by a write transaction when it draws its revs, and held
	// until it ends; the relay takes it exclusive for an instant, which waits for every
	// transaction that drew a rev before, so it never publishes a later rev before an
	// earlier one (see emit and Relay.horizon).
	revLockID int64 = 0x546f6c6c_00000004
	// migrateLockID serializes migrations of replicas starting together.
	migrateLockID int64 = 0x546f6c6c_00000003
)

// NotifyChannel is the LISTEN/NOTIFY channel a write transaction notifies on commit.
const NotifyChannel = "tollgate_outbox"

// Migrate creates the database named in databaseURL when it does not exist (connecting to
// the server's "postgres" database to do so) and applies every pending migration.
// Replicas may call it concurrently.
func Migrate(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: database url: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		// A frozen server would otherwise hold a starting process here for good; the
		// migrations themselves may take their time.
		cfg.ConnectTimeout = DefaultTimeout
	}
	if err := ensureDatabase(ctx, cfg); err != nil {
		return err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close()
	dir, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrateLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, dir, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", cfg.Database, err)
	}
	return nil
}

// ensureDatabase creates cfg.Database if connecting to it says it does not exist.
func ensureDatabase(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("postgres: connect to %s: %w", cfg.Database, err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("postgres: database %s does not exist and the server's postgres database is not reachable to create it: %w", cfg.Database, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil // created meanwhile by another replica
	}
	if err != nil {
		return fmt.Errorf("postgres: create database %s: %w", cfg.Database, err)
	}
	return nil
}

// DB is the Postgres store. It implements the tenants services; all its methods are safe
// for concurrent use.
type DB struct {
	pool     *pgxpool.Pool
	upstream *tenants.UpstreamAddressRule
	timeout  time.Duration // bounds background calls that come without a deadline; 0: none
	cells    []string      // declared cells, new tenants' choice (cells.go)

	notifyInTx      bool          // see WithNotifyInTransaction
	exclusiveChecks bool          // see WithSharedLimitChecks
	exclusiveRevs   bool          // see WithSharedRevLock
	separateTrips   bool          // see WithFoldedRoundTrips
	kick            chan struct{} // wakes the notifier (outbox.go)
	stop            chan struct{}
	notifierDone    chan struct{}
	closeOnce       sync.Once
}

// DefaultTimeout is the bound of Open when WithTimeout is not given.
const DefaultTimeout = 5 * time.Second

// Option configures a DB at Open.
type Option func(*DB)

// WithUpstreamAddressRule sets the operator's rules that route upstreams are validated
// against. Default: the zero policy, which refuses loopback, link-local and private
// addresses.
func WithUpstreamAddressRule(p *tenants.UpstreamAddressRule) Option {
	return func(db *DB) { db.upstream = p }
}

// WithTimeout bounds the store's work against a database that is down or frozen (one that
// accepts connections and never answers): connecting (unless the URL sets
// connect_timeout), each statement on the server (unless the URL sets statement_timeout),
// and each call of the relay and the domain checks, which run without a caller's
// deadline. The caller's own deadline bounds everything else: the api gives each request
// one. d <= 0 removes the bounds. Default: DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(db *DB) { db.timeout = max(d, 0) }
}

// Open connects to a migrated database.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: database url: %w", err)
	}
	db := &DB{upstream: &tenants.UpstreamAddressRule{}, timeout: DefaultTimeout, cells: []string{DefaultCell}}
	for _, o := range opts {
		o(db)
	}
	boundConfig(cfg.ConnConfig, db.timeout)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	db.pool = pool
	pctx, cancel := db.bound(ctx)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	db.kick, db.stop, db.notifierDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go db.notifier()
	return db, nil
}

// boundConfig applies the timeout where the URL (or PGCONNECT_TIMEOUT) sets none.
func boundConfig(cfg *pgx.ConnConfig, d time.Duration) {
	if d <= 0 {
		return
	}
	if cfg.ConnectTimeout == 0 {
		// The whole connection process, TLS and startup included: a frozen server
		// accepts the TCP connection and then never answers.
		cfg.ConnectTimeout = d
	}
	if _, ok := cfg.RuntimeParams["statement_timeout"]; !ok {
		// The server's own bound, so a statement whose caller gave up does not run on.
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	}
}

// bound gives ctx the store's timeout when it has no deadline of its own: the background
// loops' calls, which no request bounds.
func (db *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || db.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, db.timeout)
}

// Close closes every connection.
func (db *DB) Close() {
	db.closeOnce.Do(func() {
		close(db.stop)
		<-db.notifierDone
	})
	db.pool.Close()
}

// Ping checks that the database answers, for readiness probes.
func (db *DB) Ping(ctx context.Context) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	return db.pool.Ping(ctx)
}

// write runs fn in one transaction that holds the writer lock shared, so a resync snapshot
// never sees half of the writes in flight. The transaction also records ctx's audit
// entry (see change).
func (db *DB) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return db.change(ctx, true, fn)
}

// change runs fn in one transaction and, when ctx carries an audit entry
// (tenants.WithAudit), inserts it in that transaction once fn succeeds: a change and its
// entry commit together or not at all. writer takes the writer lock shared, as every
// write of config entries must; the api's own data (tokens, people) needs no lock.
//
// A write that finds a tenant near one of its limits only once it holds the tenant's
// shared lock (see checkCount) is run again, checking exclusively: fn may run twice.
func (db *DB) change(ctx context.Context, writer bool, fn func(tx pgx.Tx) error) error {
	emitted := false
	err := db.attempt(ctx, writer, false, &emitted, fn)
	if errors.Is(err, errNearLimit) {
		err = db.attempt(ctx, writer, true, &emitted, fn)
	}
	if err == nil && emitted && !db.notifyInTx {
		db.notified()
	}
	return err
}

func (db *DB) attempt(ctx context.Context, writer, exclusive bool, emitted *bool, fn func(tx pgx.Tx) error) error {
	opts := pgx.TxOptions{}
	if writer {
		// One round trip for both.
		opts.BeginQuery = fmt.Sprintf("BEGIN; SELECT pg_advisory_xact_lock_shared(%d)", writerLockID)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release() // a connection still in a transaction is closed, not pooled
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	_, audited := tenants.AuditOf(ctx)
	wt := &writeTx{Tx: tx, audited: audited, exclusive: exclusive, deferred: true, notifyInTx: db.notifyInTx,
		sharedChecks: !db.exclusiveChecks, exclusiveRevs: db.exclusiveRevs, separateTrips: db.separateTrips}
	if err := db.finish(ctx, wt, emitted, fn); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // after a failed COMMIT, a no-op
		return err
	}
	return nil
}

// finish runs fn in wt and commits. The write's tail goes in one round trip: its outbox
// rows (once their revs are drawn), its counts, its audit entries and, folded (see
// WithFoldedRoundTrips), the COMMIT itself.
func (db *DB) finish(ctx context.Context, wt *writeTx, emitted *bool, fn func(tx pgx.Tx) error) error {
	if err := fn(wt); err != nil {
		return err
	}
	b := &pgx.Batch{}
	*emitted = len(wt.pending) > 0
	if err := wt.flushEmits(ctx, b); err != nil {
		return err
	}
	wt.queueCounts(b)
	if err := wt.queueAudit(ctx, b); err != nil {
		return err
	}
	folded := b.Len() > 0 && !db.separateTrips
	if folded {
		b.Queue("COMMIT")
	}
	if b.Len() > 0 {
		if err := wt.SendBatch(ctx, b).Close(); err != nil || folded {
			return err
		}
	}
	return wt.Commit(ctx)
}

// newID returns a UUIDv7, so ids sort in creation order.
func newID() string { return uuid.Must(uuid.NewV7()).String() }

// parseID reports whether s is a UUID. An id that is not one names no object.
func parseID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// page normalizes a page request: the limit clamped, the cursor checked. The first page's
// cursor is the nil UUID, below every id. The list queries order by table.id: a bare id
// names the id::text output column, and sorting by it reads and sorts all the tenant's
// rows for every page (130 ms a page at 50,000 routes) instead of walking the primary key.
func page(p tenants.Page) (limit int, cursor string, err error) {
	limit = p.Limit
	switch {
	case limit <= 0:
		limit = tenants.DefaultPageLimit
	case limit > tenants.MaxPageLimit:
		limit = tenants.MaxPageLimit
	}
	if p.Cursor == "" {
		return limit, uuid.Nil.String(), nil
	}
	if !parseID(p.Cursor) {
		return 0, "", tenants.Errorf(tenants.EInvalidRequest, "cursor %q is not one this list returned", p.Cursor)
	}
	return limit, p.Cursor, nil
}

// nextCursor trims a page queried with limit+1 rows and returns the cursor of the next
// page, "" at the end.
func nextCursor[T any](items []T, limit int, id func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, id(items[limit-1])
}

func notFound(what string) *tenants.Error {
	return tenants.Errorf(tenants.ENotFound, "%s not found", what)
}

// constraintError turns a violation of one of the named constraints into the domain error
// given for it; any other error is returned wrapped as internal.
func constraintError(err error, op string, byConstraint map[string]*tenants.Error) error {
	if err == nil {
		return nil
	}
	var te *tenants.Error
	if errors.As(err, &te) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "23503") {
		if e, ok := byConstraint[pgErr.ConstraintName]; ok {
			return e
		}
		if strings.HasSuffix(pgErr.ConstraintName, "_tenant_fkey") {
			return notFound("tenant")
		}
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

func utc(t time.Time) time.Time { return t.UTC() }
