package postgres

import (
	"context"
	"time"
)

// RelayObserver hears what the active relay does, for metrics: every change it
// published with the time since the change was written (its transaction's start, the
// outbox row's created_at), and every batch whose publish failed.
type RelayObserver interface {
	Published(lag time.Duration)
	PublishFailed()
}

// SetObserver makes o hear the relay's publishes and failures; call it before Run.
func (r *Relay) SetObserver(o RelayObserver) {
	r.mu.Lock()
	r.obs = o
	r.mu.Unlock()
}

func (r *Relay) observer() RelayObserver {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.obs
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
