package pgtest

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a test's Postgres that the test can take down in the
// two ways a database fails: Cut, as a stopped server (the port refuses connections, the
// open ones are closed), and Freeze, as a server stopped with SIGSTOP (connections are
// accepted, nothing is answered; what was sent is delivered when it thaws). Restore brings
// it back either way. It serves the whole test and closes at cleanup.
type Proxy struct {
	tb     testing.TB
	target string
	addr   string // the proxy's host:port, kept across a Cut

	mu     sync.Mutex
	ln     net.Listener // nil while cut
	frozen bool
	thawed chan struct{} // closed when the proxy thaws; replaced by each Freeze
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to the server of databaseURL and returns it with the same URL
// pointed at the proxy.
func NewProxy(tb testing.TB, databaseURL string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		tb.Fatalf("pgtest: proxy: database url: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: proxy: %v", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{tb: tb, target: u.Host, addr: ln.Addr().String(), ln: ln, thawed: thawed, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	tb.Cleanup(p.close)
	u.Host = p.addr
	return p, u.String()
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes the port and every open connection, as a stopped server: connecting is
// refused, and the server rolls back what the closed sessions had begun.
func (p *Proxy) Cut() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// Freeze stops every byte in both directions while connections are still accepted, as a
// server stopped with SIGSTOP.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thawed = make(chan struct{})
	}
}

// Restore undoes Cut or Freeze: the port accepts again (on the same address), and what a
// frozen proxy held flows on.
func (p *Proxy) Restore() {
	p.tb.Helper()
	p.mu.Lock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
	cut := p.ln == nil
	p.mu.Unlock()
	if !cut {
		return
	}
	var ln net.Listener
	var err error
	for range 50 { // the port was just closed: rebinding may need a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.tb.Fatalf("pgtest: proxy: listen again on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				c.Close()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.relay(c)
			}()
		}
	}()
}

// track registers c unless the proxy has been cut meanwhile.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// relay connects a client to the server once the proxy is not frozen, then copies both
// ways until either side closes or the proxy is cut.
func (p *Proxy) relay(client net.Conn) {
	defer p.untrack(client)
	if !p.wait(client) {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.copy(server, client); done <- struct{}{} }()
	go func() { p.copy(client, server); done <- struct{}{} }()
	<-done
	// One side ended: end the other, as a real peer's close would.
	client.Close()
	server.Close()
	<-done
}

// copy moves bytes from src to dst, holding each chunk while the proxy is frozen.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the proxy is frozen; it reports false when c was closed meanwhile
// (the proxy was cut or closed).
func (p *Proxy) wait(c net.Conn) bool {
	for {
		p.mu.Lock()
		frozen, thawed := p.frozen, p.thawed
		_, live := p.conns[c]
		p.mu.Unlock()
		if !live {
			return false
		}
		if !frozen {
			return true
		}
		select {
		case <-thawed:
		case <-time.After(50 * time.Millisecond): // notice a Cut while frozen
		}
	}
}

func (p *Proxy) close() {
	p.Cut()
	p.mu.Lock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
