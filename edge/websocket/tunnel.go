package websocket

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/edge/conn"
	"tollgate/edge/meter"
)

// Tunnel is one relayed WebSocket connection.
type Tunnel struct {
	set            *Set
	up             net.Conn
	direct         net.Conn // the client connection, for writes, deadlines and close
	ack            []byte   // the 101 head and any bytes the upstream sent after it
	early          int      // how many of ack's bytes are the upstream's, after the head
	idle, lifetime time.Duration

	last      atomic.Int64 // unix nanos of the last byte relayed either way
	wmu       sync.Mutex   // client writes
	closed    bool         // under wmu
	closeOnce sync.Once

	// Metering: the bytes relayed each way, and how many of them were recorded;
	// use.Route is nil when the route is not metered.
	use           meter.Usage
	in, out       atomic.Int64
	mmu           sync.Mutex
	recIn, recOut int64 // under mmu
}

// New is the tunnel between up, the upstream connection Dial opened, and the client's
// connection direct, which gets all writes, deadlines and the close (not through a
// wrapper of the server's whose Close waits for the handler, nor one meant for one
// goroutine). ack (Ack's) goes to the client first. The tunnel closes after idle without
// a byte either way, or after lifetime. With use.Route set, the bytes it relays are
// recorded under use: client→upstream as bytes in, upstream→client as bytes out,
// frames with their headers, the early bytes of ack included.
func New(up, direct net.Conn, ack []byte, early int, idle, lifetime time.Duration, use meter.Usage) *Tunnel {
	return &Tunnel{up: up, direct: direct, ack: ack, early: early, idle: idle, lifetime: lifetime, use: use}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// Run relays until the tunnel ends; it owns client, the server's hijacked connection
// (which first returns what the server had buffered behind the upgrade request), and
// must be called once, after the Set has taken the tunnel in (Add).
func (w *Tunnel) Run(client net.Conn) {
	defer w.set.done(w)
	defer w.meterBytes() // before done: Shutdown waits for the tunnel's last record
	w.wmu.Lock()
	closed := w.closed
	if !closed {
		_, err := w.direct.Write(w.ack)
		closed = err != nil
		if !closed {
			w.out.Add(int64(w.early))
		}
	}
	w.ack = nil
	w.wmu.Unlock()
	if closed {
		w.close(false)
		return
	}
	w.last.Store(time.Now().UnixNano())
	idle := w.idle
	var idleTimer *time.Timer
	idleTimer = time.AfterFunc(idle, func() {
		since := time.Since(time.Unix(0, w.last.Load()))
		if since >= idle {
			w.close(true)
			return
		}
		idleTimer.Reset(idle - since)
	})
	lifeTimer := time.AfterFunc(w.lifetime, func() { w.close(true) })
	defer idleTimer.Stop()
	defer lifeTimer.Stop()

	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		w.relay(nil, w.up, &w.out, func(b []byte) error {
			w.wmu.Lock()
			defer w.wmu.Unlock()
			if w.closed {
				return net.ErrClosed
			}
			_, err := w.direct.Write(b)
			return err
		})
		w.close(false)
	}()
	w.relay(client, w.direct, &w.in, func(b []byte) error {
		_, err := w.up.Write(b)
		return err
	})
	w.close(false)
	<-upDone
}

// relay copies from src through write until either fails, adding what it wrote to
// relayed. first, when not nil, is read before src until a read returns less than the
// buffer: the client's hijacked connection, which returns first what the server buffered
// behind the upgrade request, and whose read that comes up short has nothing buffered
// left; src is the same socket, which conn.Relay then reads directly.
func (w *Tunnel) relay(first io.Reader, src net.Conn, relayed *atomic.Int64, write func([]byte) error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	deliver := func(b []byte) error {
		w.last.Store(time.Now().UnixNano())
		if err := write(b); err != nil {
			return err
		}
		relayed.Add(int64(len(b)))
		return nil
	}
	for first != nil {
		n, err := first.Read(buf)
		if n > 0 && deliver(buf[:n]) != nil || err != nil {
			return
		}
		if n < len(buf) {
			first = nil
		}
	}
	_ = conn.Relay(src, buf, deliver)
}

// MeterInterval is how often an open tunnel's bytes are recorded: a tunnel may live a
// day, and its bytes are billed in the hours they went through, not all at its end.
const MeterInterval = time.Minute

// meterBytes records the bytes relayed since the last record.
func (w *Tunnel) meterBytes() {
	if w.use.Route == nil {
		return
	}
	w.mmu.Lock()
	in, out := w.in.Load(), w.out.Load()
	din, dout := in-w.recIn, out-w.recOut
	w.recIn, w.recOut = in, out
	w.mmu.Unlock()
	u := &w.use
	u.Route.RecordBytes(u.Consumer, u.Status, u.Upstream, din, dout, time.Now())
}

// close ends the tunnel once: with goingAway, the client first gets a 1001 close frame.
func (w *Tunnel) close(goingAway bool) {
	w.closeOnce.Do(func() {
		w.wmu.Lock()
		w.closed = true
		if goingAway {
			_ = w.direct.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = w.direct.Write(closeGoingAway)
		}
		_ = w.direct.Close()
		w.wmu.Unlock()
		_ = w.up.Close()
	})
}

// Set is an edge's open tunnels, for Shutdown. Its zero value is ready to use.
type Set struct {
	mu       sync.Mutex
	conns    map[*Tunnel]struct{}
	draining bool
	wg       sync.WaitGroup
	open     atomic.Int64

	// The meter's sweep over open tunnels, started with the first metered one.
	meterEvery time.Duration // MeterInterval unless set
	sweeping   bool
	stopSweep  chan struct{}
}

// SetMeterInterval sets how often the open tunnels' bytes are recorded (MeterInterval
// unless set); call it before the first tunnel opens.
func (s *Set) SetMeterInterval(d time.Duration) {
	s.mu.Lock()
	s.meterEvery = d
	s.mu.Unlock()
}

// Open is the number of open tunnels.
func (s *Set) Open() int { return int(s.open.Load()) }

// Add takes w in before it runs; false once Shutdown has begun, when w must not run.
func (s *Set) Add(w *Tunnel) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	if s.conns == nil {
		s.conns = map[*Tunnel]struct{}{}
	}
	if w.use.Route != nil && !s.sweeping {
		s.sweeping = true
		s.stopSweep = make(chan struct{})
		every := s.meterEvery
		if every <= 0 {
			every = MeterInterval
		}
		go s.sweep(every, s.stopSweep)
	}
	w.set = s
	s.conns[w] = struct{}{}
	s.wg.Add(1)
	s.open.Add(1)
	return true
}

// sweep records every open tunnel's bytes each period, until stop.
func (s *Set) sweep(every time.Duration, stop chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.mu.Lock()
			for w := range s.conns {
				w.meterBytes()
			}
			s.mu.Unlock()
		}
	}
}

func (s *Set) done(w *Tunnel) {
	s.mu.Lock()
	delete(s.conns, w)
	s.mu.Unlock()
	s.open.Add(-1)
	s.wg.Done()
}

// Shutdown sends every tunnel's client a close frame, closes both ends and waits for
// the relays to finish, or for ctx. No tunnel is added after it begins.
func (s *Set) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	if s.sweeping {
		// Each tunnel records its rest as it closes.
		close(s.stopSweep)
		s.sweeping = false
	}
	conns := make([]*Tunnel, 0, len(s.conns))
	for w := range s.conns {
		conns = append(conns, w)
	}
	s.mu.Unlock()
	for _, w := range conns {
		w.close(true)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
