// Package outboxrelay moves the rows of the Postgres store's outbox to the KV bucket: the
// store (tenants/postgres) writes them, in the transaction of each change, and a relay
// publishes them in rev order. tenants/postgres.NewRelay makes one.
package outboxrelay

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Publisher puts config changes into the KV bucket, in the order given. tenants/nats
// implements it.
type Publisher interface {
	Publish(ctx context.Context, changes []tenants.Change) error
}

// Store is what a relay needs of the Postgres store (tenants/postgres.DB).
type Store interface {
	// ConnConfig is a copy of the store's connection settings, for the relay's own
	// session.
	ConnConfig() *pgx.ConnConfig
	// Bound gives ctx the store's timeout when it has no deadline of its own.
	Bound(ctx context.Context) (context.Context, context.CancelFunc)
	// Entries calls fn with every object's entry, with fresh revs, in rev order, and
	// returns the first rev (see tenants/postgres.DB.Entries).
	Entries(ctx context.Context, fn func(tenants.Change) error) (firstRev int64, err error)
}

// Locks are the advisory lock ids and the channel a relay shares with the store's
// writers.
type Locks struct {
	Relay  int64  // held by the active relay for its session
	Rev    int64  // taken shared by writers as they draw revs (see horizon)
	Notify string // the LISTEN/NOTIFY channel writers notify after commit
}

// Relay moves outbox rows to the KV bucket. Every api replica runs one; a Postgres
// advisory lock makes exactly one of them active per database, and the others wait to
// take over.
//
// The active relay publishes unsent rows in id order, a batch per Publish call, and marks
// a batch sent in the transaction that selected it, after Publish returned. A failed
// Publish (NATS down) is retried with backoff, so nothing is lost or reordered; a batch
// whose mark did not commit (the relay died in between) is published again by the next
// relay, which the edges tolerate because they ignore revs they already hold.
//
// Write transactions draw their revs under a shared lock held until they end (see the
// store's emit).
// Before it reads a batch, the relay takes that lock exclusive for an instant: once it
// has it, every rev drawn so far is committed or rolled back, and it publishes only up to
// the highest committed one, so a rev still in flight is never overtaken and the bucket
// receives revs rising.
type Relay struct {
	db    Store
	locks Locks
	pub   Publisher
	log   *slog.Logger

	batch      int           // rows per Publish
	gap        time.Duration // the least time between two batches' waits for the rev lock
	lastWait   time.Time
	poll       time.Duration // wait for a notification at most this long
	contend    time.Duration // retry the lock this often while another relay holds it
	retryMin   time.Duration
	retryMax   time.Duration
	pruneEvery time.Duration
	keep       time.Duration // sent rows are kept this long, for inspection

	reqs        chan *resyncRequest
	remoteApply func(context.Context, []tenants.Change) error // for other processes' requests

	mu      sync.Mutex
	running bool
	kicked  bool               // wake the next wait at once
	wake    context.CancelFunc // ends the current wait
	status  RelayStatus
	obs     Observer // observer.go
}

// RelayStatus is what a relay reports for readiness and metrics.
type RelayStatus struct {
	// Active: this relay holds the lock and is publishing.
	Active bool `json:"active"`
	// LastRev is the highest rev this relay has published.
	LastRev int64 `json:"last_rev"`
	// LastPublish is when this relay last published a batch.
	LastPublish time.Time `json:"last_publish"`
	// Failing holds the last publish error while publishing is being retried.
	Failing string `json:"failing,omitempty"`
}

// New returns a relay of db's outbox to pub. It does nothing until Run.
func New(db Store, locks Locks, pub Publisher, log *slog.Logger) *Relay {
	if log == nil {
		log = slog.Default()
	}
	return &Relay{
		db: db, locks: locks, pub: pub, log: log.With("component", "outbox-relay"),
		batch: 1000, gap: 10 * time.Millisecond, poll: time.Second, contend: time.Second,
		retryMin: 50 * time.Millisecond, retryMax: 5 * time.Second,
		pruneEvery: 10 * time.Minute, keep: 24 * time.Hour,
		reqs: make(chan *resyncRequest, 1),
	}
}

// Status reports the relay's state.
func (r *Relay) Status() RelayStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Run relays until ctx ends, contending for the lock whenever it does not hold it (also
// after losing its connection). It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("postgres: relay is already running")
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
	}()
	for {
		err := r.session(ctx, r.serve)
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("outbox relay lost its database connection; contending again", "err", err)
		if !sleep(ctx, r.contend) {
			return nil
		}
	}
}

// session opens a dedicated connection, waits until it holds the relay lock and runs fn
// with it. Closing the connection releases the lock, so a relay that dies, or whose
// connection drops, hands over without anyone's help.
func (r *Relay) session(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	conn, err := pgx.ConnectConfig(ctx, r.db.ConnConfig())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for waiting := false; ; waiting = true {
		ok, err := r.tryLock(ctx, conn)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if !waiting {
			r.log.Debug("another relay is active; standing by")
		}
		if !sleep(ctx, r.contend) {
			return ctx.Err()
		}
	}
	r.setActive(true)
	defer r.setActive(false)
	r.log.Info("outbox relay active")
	return fn(ctx, conn)
}

func (r *Relay) tryLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	// Bounded, so a frozen server costs the relay its connection (and a new one once the
	// server answers) rather than a wait as long as the freeze.
	ctx, cancel := r.db.Bound(ctx)
	defer cancel()
	var ok bool
	err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.locks.Relay).Scan(&ok)
	return ok, err
}

func (r *Relay) setActive(active bool) {
	r.mu.Lock()
	r.status.Active = active
	r.mu.Unlock()
}

// serve is the active relay's loop.
func (r *Relay) serve(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{r.locks.Notify}.Sanitize()+`; LISTEN `+resyncChannel); err != nil {
		return err
	}
	var (
		lastPrune time.Time
		backoff   time.Duration
		remote    []string            // resync requests of other processes, by request id
		served    = map[string]bool{} // a requester repeats its id while it waits
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case req := <-r.reqs:
			if req.ctx.Err() != nil {
				continue // the caller gave up waiting
			}
			res, err := r.resync(ctx, conn, req.apply)
			req.done <- resyncReply{res, err}
			if conn.IsClosed() {
				return err
			}
			continue
		default:
		}
		if len(remote) > 0 {
			id := remote[0]
			remote = remote[1:]
			if served[id] {
				continue
			}
			if len(served) > 1000 {
				clear(served)
			}
			served[id] = true
			if err := r.serveRemoteResync(ctx, conn, id); err != nil && (conn.IsClosed() || ctx.Err() != nil) {
				return err
			}
			continue
		}
		if time.Since(lastPrune) >= r.pruneEvery {
			if err := r.prune(ctx, conn); err != nil {
				if conn.IsClosed() || ctx.Err() != nil {
					return err
				}
				r.log.Warn("outbox relay: prune failed", "err", err)
			}
			lastPrune = time.Now()
		}
		n, err := r.publishBatch(ctx, conn)
		if err != nil {
			if conn.IsClosed() || ctx.Err() != nil {
				return err
			}
			backoff = min(max(2*backoff, r.retryMin), r.retryMax)
			r.mu.Lock()
			r.status.Failing = err.Error()
			obs := r.obs
			r.mu.Unlock()
			if obs != nil {
				obs.PublishFailed()
			}
			r.log.Warn("outbox relay: publishing failed; retrying", "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return ctx.Err()
			}
			continue
		}
		if backoff > 0 {
			backoff = 0
			r.log.Info("outbox relay: publishing again")
		}
		if n == r.batch {
			continue // more may be waiting
		}
		ids, err := r.wait(ctx, conn)
		if err != nil {
			return err
		}
		remote = append(remote, ids...)
	}
}

// publishBatch publishes the oldest unsent rows and marks them sent. It returns how many
// rows it published.
func (r *Relay) publishBatch(ctx context.Context, conn *pgx.Conn) (int, error) {
	// Each wait for the rev lock holds new writers back for about one commit: a batch
	// follows the last by at least gap, so that a busy outbox is read in larger batches
	// rather than with a wait after each few rows.
	if wait := r.gap - time.Since(r.lastWait); wait > 0 && !sleep(ctx, wait) {
		return 0, ctx.Err()
	}
	r.lastWait = time.Now()
	// Reading the batch is bounded (see tryLock); publishing has its own bounds.
	qctx, cancel := r.db.Bound(ctx)
	defer cancel()
	upTo, err := horizon(qctx, conn, r.locks.Rev)
	if err != nil {
		return 0, err
	}
	tx, err := conn.Begin(qctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(qctx, `SELECT id, key, value, created_at, cell FROM outbox WHERE sent_at IS NULL AND id <= $2
		ORDER BY id LIMIT $1 FOR UPDATE`, r.batch, upTo)
	if err != nil {
		return 0, err
	}
	var written []time.Time // per change, for the publish lag
	changes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tenants.Change, error) {
		var c tenants.Change
		var at time.Time
		err := row.Scan(&c.Rev, &c.Key, &c.Value, &at, &c.Cell)
		written = append(written, at)
		return c, err
	})
	cancel()
	if err != nil || len(changes) == 0 {
		return 0, err
	}
	if err := r.pub.Publish(ctx, changes); err != nil {
		return 0, fmt.Errorf("publish revs %d..%d: %w", changes[0].Rev, changes[len(changes)-1].Rev, err)
	}
	// The batch is out: record that even if ctx has just ended, or the next relay would
	// publish it again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	revs := make([]int64, len(changes))
	for i, c := range changes {
		revs[i] = c.Rev
	}
	if _, err := tx.Exec(mctx, `UPDATE outbox SET sent_at = now() WHERE id = ANY($1)`, revs); err != nil {
		return 0, err
	}
	if err := tx.Commit(mctx); err != nil {
		return 0, err
	}
	r.published(revs[len(revs)-1])
	if obs := r.observer(); obs != nil {
		now := time.Now()
		for _, at := range written {
			obs.Published(now.Sub(at))
		}
	}
	return len(changes), nil
}

// horizon returns the highest rev the relay may publish up to: it waits, holding the rev
// lock exclusive, until every transaction that drew a rev has ended (writers hold it
// shared from drawing to commit), and reads the highest rev committed. A rev
// drawn later is above it. Writers that come meanwhile wait for the lock, about as long
// as the slowest commit in flight, once per batch.
func horizon(ctx context.Context, conn *pgx.Conn, revLock int64) (int64, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_lock($1)`, revLock)
	b.Queue(`SELECT coalesce(max(id), 0) FROM outbox`)
	b.Queue(`SELECT pg_advisory_unlock($1)`, revLock)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	var upTo int64
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	if err := br.QueryRow().Scan(&upTo); err != nil {
		return 0, err
	}
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	return upTo, br.Close()
}

func (r *Relay) published(rev int64) {
	r.mu.Lock()
	r.status.LastRev = max(r.status.LastRev, rev)
	r.status.LastPublish = time.Now()
	r.status.Failing = ""
	r.mu.Unlock()
}

// wait returns on a notification, after the poll interval (the safety net for a missed
// notification), when kicked, or with an error when ctx ends or the connection is lost.
// It returns the ids of the resync requests that came in.
func (r *Relay) wait(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	r.mu.Lock()
	if r.kicked {
		r.kicked = false
		r.mu.Unlock()
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, r.poll)
	r.wake = cancel
	r.mu.Unlock()
	n, err := conn.WaitForNotification(wctx)
	r.mu.Lock()
	r.wake, r.kicked = nil, false
	r.mu.Unlock()
	cancel()
	if conn.IsClosed() || ctx.Err() != nil {
		return nil, cmp.Or(err, ctx.Err())
	}
	var ids []string
	// One batch serves every outbox notification that came in meanwhile: drain the
	// buffered ones, keeping resync requests.
	done, stop := context.WithCancel(ctx)
	stop()
	for ; n != nil; n, _ = conn.WaitForNotification(done) {
		if n.Channel == resyncChannel && n.Payload != "" {
			ids = append(ids, n.Payload)
		}
	}
	return ids, nil
}

// kick makes the active relay look at its requests now rather than after its wait.
func (r *Relay) kick() {
	r.mu.Lock()
	r.kicked = true
	if r.wake != nil {
		r.wake()
	}
	r.mu.Unlock()
}

// prune deletes rows sent longer ago than r.keep.
func (r *Relay) prune(ctx context.Context, conn *pgx.Conn) error {
	tag, err := conn.Exec(ctx, `DELETE FROM outbox WHERE sent_at < now() - make_interval(secs => $1)`, r.keep.Seconds())
	if err == nil && tag.RowsAffected() > 0 {
		r.log.Debug("outbox relay: pruned sent rows", "rows", tag.RowsAffected())
	}
	return err
}

// ResyncResult says what a resync did.
type ResyncResult struct {
	Entries    int   // entries published: every live object
	FirstRev   int64 // the entries have revs FirstRev..FirstRev+Entries-1
	Superseded int64 // unsent outbox rows marked sent because the entries replace them
}

type resyncRequest struct {
	ctx   context.Context
	apply func(context.Context, []tenants.Change) error
	done  chan resyncReply
}

type resyncReply struct {
	res ResyncResult
	err error
}

// Resync rebuilds the KV bucket from Postgres. Holding the relay lock, so that no relay
// publishes meanwhile, it reads the current entry of every object of every tenant with
// fresh revs (see Store.Entries) and hands them all to apply, which must make the bucket hold
// exactly those entries and no other key (tenants/nats.Resync does). Then it marks every
// unsent outbox row the entries supersede as sent; later changes follow as usual.
//
// With a nil apply, Resync publishes the entries through the relay's publisher instead and
// deletes nothing: stale keys stay, and pending deletes stay unsent and go out as usual.
//
// When Run is running in this process, the resync is done by its loop once it is active
// (it may wait for another replica's relay to give up the lock: bound ctx). Otherwise
// Resync takes the lock itself when it is free, and when another process's relay holds
// it, asks that relay to resync (with the apply given to its SetResyncApply) and waits
// for its answer. A failed resync leaves the outbox as it was.
func (r *Relay) Resync(ctx context.Context, apply func(ctx context.Context, live []tenants.Change) error) (ResyncResult, error) {
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if !running {
		return r.resyncElsewhere(ctx, apply)
	}
	req := &resyncRequest{ctx: ctx, apply: apply, done: make(chan resyncReply, 1)}
	select {
	case r.reqs <- req:
		r.kick()
	case <-ctx.Done():
		return ResyncResult{}, ctx.Err()
	}
	select {
	case rep := <-req.done:
		return rep.res, rep.err
	case <-ctx.Done():
		return ResyncResult{}, ctx.Err()
	}
}

// SetTimings changes a relay's waits (tests shorten them): how often it retries the lock
// while another relay holds it, how long it waits for a notification at most, and how
// many rows it publishes at once. Call it before Run.
func (r *Relay) SetTimings(contend, poll time.Duration, batch int) {
	r.contend, r.poll, r.batch = contend, poll, batch
}

// Channels of resync requests to the active relay of another process and of its answers.
const (
	resyncChannel     = "tollgate_resync"
	resyncDoneChannel = "tollgate_resync_done"
)

// SetResyncApply sets the apply an active relay uses for resync requests from other
// processes (`tollgate api --resync` while the api runs). Without one it refuses them.
func (r *Relay) SetResyncApply(apply func(ctx context.Context, live []tenants.Change) error) {
	r.mu.Lock()
	r.remoteApply = apply
	r.mu.Unlock()
}

type resyncAnswer struct {
	ID         string `json:"id"`
	Entries    int    `json:"entries"`
	FirstRev   int64  `json:"first_rev"`
	Superseded int64  `json:"superseded"`
	Error      string `json:"error,omitempty"`
}

// serveRemoteResync resyncs for another process and notifies it of the outcome.
func (r *Relay) serveRemoteResync(ctx context.Context, conn *pgx.Conn, id string) error {
	r.mu.Lock()
	apply := r.remoteApply
	r.mu.Unlock()
	ans := resyncAnswer{ID: id}
	if apply == nil {
		ans.Error = "the active relay has no bucket to resync"
	} else if res, err := r.resync(ctx, conn, apply); err != nil {
		ans.Error = err.Error()
	} else {
		ans.Entries, ans.FirstRev, ans.Superseded = res.Entries, res.FirstRev, res.Superseded
	}
	payload, _ := json.Marshal(ans)
	_, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, resyncDoneChannel, string(payload))
	return err
}

// resyncElsewhere resyncs holding the relay lock when it is free, or has the relay that
// holds it do so.
func (r *Relay) resyncElsewhere(ctx context.Context, apply func(context.Context, []tenants.Change) error) (ResyncResult, error) {
	conn, err := pgx.ConnectConfig(ctx, r.db.ConnConfig())
	if err != nil {
		return ResyncResult{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+resyncDoneChannel); err != nil {
		return ResyncResult{}, err
	}
	var idb [12]byte
	rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	asked := false
	for {
		ok, err := r.tryLock(ctx, conn)
		if err != nil {
			return ResyncResult{}, err
		}
		if ok {
			r.setActive(true)
			defer r.setActive(false)
			return r.resync(ctx, conn, apply)
		}
		if !asked {
			r.log.Info("another process's relay is active; asking it to resync")
			if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, resyncChannel, id); err != nil {
				return ResyncResult{}, err
			}
			asked = true
		}
		// Wait for the answer; look at the lock again now and then in case that relay
		// went away before it saw the request.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return ResyncResult{}, ctx.Err()
		}
		if conn.IsClosed() {
			return ResyncResult{}, err
		}
		if n == nil {
			asked = false // ask again: a request sent while no relay listened is lost
			continue
		}
		var ans resyncAnswer
		if json.Unmarshal([]byte(n.Payload), &ans) != nil || ans.ID != id {
			continue
		}
		if ans.Error != "" {
			return ResyncResult{}, fmt.Errorf("postgres: resync by the active relay: %s", ans.Error)
		}
		return ResyncResult{Entries: ans.Entries, FirstRev: ans.FirstRev, Superseded: ans.Superseded}, nil
	}
}

// resync runs while holding the relay lock on conn.
func (r *Relay) resync(ctx context.Context, conn *pgx.Conn, apply func(context.Context, []tenants.Change) error) (ResyncResult, error) {
	var (
		all   []tenants.Change // every entry, for apply
		batch []tenants.Change // the next batch to publish, without apply
		n     int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := r.pub.Publish(ctx, batch)
		batch = nil // the publisher may keep what it was given
		return err
	}
	first, err := r.db.Entries(ctx, func(c tenants.Change) error {
		n++
		if apply != nil {
			all = append(all, c)
			return nil
		}
		batch = append(batch, c)
		if len(batch) == r.batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		if apply != nil {
			err = apply(ctx, all)
		} else {
			err = flush()
		}
	}
	if err != nil {
		return ResyncResult{}, fmt.Errorf("postgres: resync: %w", err)
	}
	tag, err := conn.Exec(ctx, `UPDATE outbox SET sent_at = now()
		WHERE sent_at IS NULL AND id < $1 AND (value IS NOT NULL OR $2::bool)`, first, apply != nil)
	if err != nil {
		return ResyncResult{}, fmt.Errorf("postgres: resync: %w", err)
	}
	res := ResyncResult{Entries: n, FirstRev: first, Superseded: tag.RowsAffected()}
	if n > 0 {
		r.published(first + int64(n) - 1)
	}
	r.log.Info("outbox relay: resynced the KV bucket", "entries", res.Entries, "superseded", res.Superseded)
	return res, nil
}

// sleep waits for d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
