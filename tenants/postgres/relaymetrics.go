package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/outboxrelay"
)

// The outbox relay lives in outboxrelay; these name it from here, where its store is.
type (
	// Relay moves outbox rows to the KV bucket (outboxrelay.Relay).
	Relay = outboxrelay.Relay
	// RelayStatus is what a relay reports for readiness and metrics.
	RelayStatus = outboxrelay.RelayStatus
	// ResyncResult says what a resync did.
	ResyncResult = outboxrelay.ResyncResult
	// RelayObserver hears what the active relay does, for metrics.
	RelayObserver = outboxrelay.Observer
)

// NewRelay returns a relay of db's outbox to pub (tenants/nats.Publisher). It does
// nothing until Run.
func NewRelay(db *DB, pub outboxrelay.Publisher, log *slog.Logger) *Relay {
	return outboxrelay.New(relayStore{db}, outboxrelay.Locks{Relay: relayLockID, Rev: revLockID, Notify: NotifyChannel}, pub, log)
}

// relayStore is what the relay needs of db.
type relayStore struct{ db *DB }

func (s relayStore) ConnConfig() *pgx.ConnConfig { return s.db.pool.Config().ConnConfig.Copy() }

func (s relayStore) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.db.bound(ctx)
}

func (s relayStore) Entries(ctx context.Context, fn func(tenants.Change) error) (int64, error) {
	return s.db.Entries(ctx, fn)
}

// OutboxBacklog is the number of outbox rows not yet published and the age of the
// oldest (zero when none waits), by the database's clock. The partial index on unsent
// rows keeps it cheap while the relay keeps up; callers poll it every few seconds rather
// than per scrape.
func (db *DB) OutboxBacklog(ctx context.Context) (rows int64, oldest time.Duration, err error) {
	var secs float64
	err = db.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
		FROM outbox WHERE sent_at IS NULL`).Scan(&rows, &secs)
	return rows, time.Duration(secs * float64(time.Second)), err
}
