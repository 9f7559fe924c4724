package conn

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestUpstreamDeadlineBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uc := &Upstream{TCPConn: c.(*net.TCPConn)}
	const ms = int64(time.Millisecond)
	now := MonoNow()
	steps := []struct {
		deadline, slack int64
		moved           bool
	}{
		{now + 1000*ms, 62 * ms, true},     // no deadline yet
		{now + 1010*ms, 62 * ms, false},    // later by less than the slack: kept
		{now + 1062*ms, 62 * ms, false},    // exactly at the bound set
		{now + 1063*ms, 62 * ms, true},     // past it
		{now + 500*ms, 31 * ms, true},      // a shorter timeout: earlier, so moved
		{now + 30000*ms, 1000 * ms, true},  // a longer one: later by more than its slack
		{now + 30500*ms, 1000 * ms, false}, // later, within the slack of the bound set: kept
		{now + 29999*ms, 1000 * ms, true},  // the bound set is past this one's slack
	}
	for i, s := range steps {
		rd, wd := uc.rd, uc.wd
		if err := uc.Bound(s.deadline, s.slack); err != nil {
			t.Fatal(err)
		}
		if moved := uc.rd != rd || uc.wd != wd; moved != s.moved {
			t.Errorf("step %d: moved=%v, want %v", i, moved, s.moved)
		}
		if uc.rd < s.deadline || uc.rd > s.deadline+s.slack || uc.wd != uc.rd {
			t.Errorf("step %d: deadlines %d/%d outside [%d, %d]", i, uc.rd, uc.wd, s.deadline, s.deadline+s.slack)
		}
	}
	if err := uc.SetDeadline(time.Time{}); err != nil || uc.rd != noDeadline || uc.wd != noDeadline {
		t.Errorf("cleared: %d/%d, %v", uc.rd, uc.wd, err)
	}
}

func TestDeadlineCoalescing(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		cur, next time.Time
		skip      bool
	}{
		{time.Time{}, now, false},                   // first deadline
		{now, now.Add(10 * time.Millisecond), true}, // a little later: keep the current one
		{now, now.Add(2 * time.Second), false},      // much later: move
		{now, now.Add(-time.Millisecond), false},    // earlier: always move
		{now, time.Time{}, false},                   // clearing: always
	} {
		if got := coalesce(c.cur, c.next); got != c.skip {
			t.Errorf("cur %v next %v: skip=%v, want %v", c.cur, c.next, got, c.skip)
		}
	}
}
