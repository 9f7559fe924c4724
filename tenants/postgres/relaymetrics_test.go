package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

type relayCounts struct {
	mu        sync.Mutex
	published int
	failed    int
	maxLag    time.Duration
}

func (c *relayCounts) Published(lag time.Duration) {
	c.mu.Lock()
	c.published++
	c.maxLag = max(c.maxLag, lag)
	c.mu.Unlock()
}

func (c *relayCounts) PublishFailed() {
	c.mu.Lock()
	c.failed++
	c.mu.Unlock()
}

func (c *relayCounts) get() (int, int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.published, c.failed, c.maxLag
}

// While the publisher is down the backlog grows and ages and the observer counts the
// failures; once it is back the backlog drains to zero and every change's lag was seen.
func TestOutboxBacklogAndRelayObserver(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	pub := &recorder{}
	r := newRelay(t, db, pub, 4)
	obs := &relayCounts{}
	r.SetObserver(obs)
	start(t, r)
	waitSent(t, conn)
	if n, age, err := db.OutboxBacklog(ctx); err != nil || n != 0 || age != 0 {
		t.Fatalf("idle backlog: %d rows, %v old, %v", n, age, err)
	}

	pub.setDown(true)
	churn(t, db, tn.ID, 6)
	time.Sleep(300 * time.Millisecond)
	n, age, err := db.OutboxBacklog(ctx)
	if err != nil || n != 6 || age < 250*time.Millisecond {
		t.Fatalf("backlog during the outage: %d rows, %v old, %v; want 6 rows at least 250ms old", n, age, err)
	}
	if _, failed, _ := obs.get(); failed == 0 {
		t.Fatal("no publish failure observed")
	}
	pub.setDown(false)
	waitSent(t, conn)
	if n, age, err := db.OutboxBacklog(ctx); err != nil || n != 0 || age != 0 {
		t.Fatalf("drained backlog: %d rows, %v old, %v", n, age, err)
	}
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		published, _, lag := obs.get()
		if published != rows {
			return fmt.Errorf("%d changes observed, want %d", published, rows)
		}
		if lag < 250*time.Millisecond {
			return errors.New("the outage's lag was not observed")
		}
		return nil
	})
}
