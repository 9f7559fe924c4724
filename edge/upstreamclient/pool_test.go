package upstreamclient

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// testPool is a pool of connections to a loopback listener that accepts and holds
// them; it counts the dials.
func testPool(t *testing.T, maxConns int, maxWait, maxIdle time.Duration) (*Client, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	var dials atomic.Int32
	var d net.Dialer
	c := &Client{Addr: ln.Addr().String(), maxConns: maxConns, maxWait: maxWait, maxIdle: maxIdle, readBufferSize: 4096,
		dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			dials.Add(1)
			return d.Dial("tcp", addr)
		}}
	t.Cleanup(c.CloseIdleConnections)
	return c, &dials
}

func poolCounts(c *Client) (open, idle, waiting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, len(c.idle), len(c.waiters)
}

// TestPoolLIFO: the most recently used idle connection serves first.
func TestPoolLIFO(t *testing.T) {
	c, dials := testPool(t, 2, 0, time.Minute)
	a, err := c.acquire(time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.acquire(time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	c.release(a)
	c.release(b)
	if got, _ := c.acquire(time.Second, false); got != b {
		t.Error("acquire did not return the connection released last")
	}
	if got, _ := c.acquire(time.Second, false); got != a {
		t.Error("acquire did not return the other idle connection")
	}
	if _, err := c.acquire(time.Second, false); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Errorf("a third acquire with two slots and no wait: %v, want ErrNoFreeConns", err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestPoolWaiters: a request that finds every slot taken gets the next connection
// released, or the slot of one closed (and dials in it); the pool never holds more
// than maxConns.
func TestPoolWaiters(t *testing.T) {
	c, dials := testPool(t, 1, time.Minute, time.Minute)
	a, err := c.acquire(time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *poolConn)
	wait := func() {
		go func() {
			pc, err := c.acquire(time.Minute, false)
			if err != nil {
				t.Error(err)
			}
			got <- pc
		}()
		poolWait(t, func() bool { _, _, w := poolCounts(c); return w == 1 })
	}

	wait()
	c.release(a)
	if b := <-got; b != a {
		t.Fatal("the waiter did not get the released connection")
	}

	wait()
	c.closeConn(a)
	b := <-got
	if b == nil || b == a {
		t.Fatal("the waiter did not dial in the closed connection's slot")
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
	if open, _, _ := poolCounts(c); open != 1 {
		t.Errorf("%d open, want 1", open)
	}
	c.release(b)
	if open, idle, w := poolCounts(c); open != 1 || idle != 1 || w != 0 {
		t.Errorf("at rest: %d open, %d idle, %d waiting; want 1, 1, 0", open, idle, w)
	}
}

// TestPoolWaitEnds: a waiter gives up after maxWait (ErrNoFreeConns, the pool is
// full) or, when shorter, its own remaining time (ErrTimeout); it leaves no trace.
func TestPoolWaitEnds(t *testing.T) {
	c, _ := testPool(t, 1, 20*time.Millisecond, time.Minute)
	a, err := c.acquire(time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire(time.Minute, false); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Errorf("after maxWait: %v, want ErrNoFreeConns", err)
	}
	c.maxWait = time.Minute
	if _, err := c.acquire(20*time.Millisecond, false); !errors.Is(err, fasthttp.ErrTimeout) {
		t.Errorf("after the request's own time: %v, want ErrTimeout", err)
	}
	if open, idle, w := poolCounts(c); open != 1 || idle != 0 || w != 0 {
		t.Errorf("%d open, %d idle, %d waiting; want 1, 0, 0", open, idle, w)
	}
	c.release(a)
	if got, err := c.acquire(time.Second, false); got != a || err != nil {
		t.Errorf("after the waits: %v, want the pooled connection", err)
	}
}

// TestPoolIdleCleaner: idle connections close after maxIdle and free their slots.
func TestPoolIdleCleaner(t *testing.T) {
	c, _ := testPool(t, 4, 0, 20*time.Millisecond)
	var held []*poolConn
	for range 3 {
		pc, err := c.acquire(time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, pc)
	}
	for _, pc := range held[:2] {
		c.release(pc)
	}
	poolWait(t, func() bool { open, idle, _ := poolCounts(c); return open == 1 && idle == 0 })
	c.release(held[2])
	poolWait(t, func() bool { open, idle, _ := poolCounts(c); return open == 0 && idle == 0 })
	c.mu.Lock()
	cleaning := c.cleaning
	c.mu.Unlock()
	if cleaning {
		// It stops once nothing is idle; it may still be between its last pass and
		// its exit, so poll.
		poolWait(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return !c.cleaning })
	}
}

func poolWait(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
	}
}
