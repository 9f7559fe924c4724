// Package testdns is a DNS server for tests: it answers, on UDP and TCP of one free
// 127.0.0.1 port, the TXT and CNAME records a test sets, as a recursive resolver would
// (CNAME chains followed in the answer, NXDOMAIN for names it does not hold, truncation
// over UDP so that large answers come over TCP). Point a resolver at Addr.
package testdns

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Server is a running test DNS server. Its methods are safe for concurrent use.
type Server struct {
	addr    string
	queries atomic.Int64
	tcp     atomic.Int64

	mu    sync.Mutex
	txt   map[string][][]string // fqdn (lower case) → records, each one or more strings
	cname map[string]string     // fqdn → target fqdn
	fail  map[string]int        // fqdn → rcode to answer
}

// Start starts a server; it stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{txt: map[string][][]string{}, cname: map[string]string{}, fail: map[string]int{}}
	ln, pc := listen(t)
	s.addr = ln.Addr().String()
	for _, srv := range []*dns.Server{{Listener: ln, Handler: s}, {PacketConn: pc, Handler: s}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("testdns: server did not start")
		}
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return s
}

// listen finds a port free on both TCP and UDP: a resolver retries a truncated UDP answer
// over TCP at the same address.
func listen(t testing.TB) (net.Listener, net.PacketConn) {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testdns: %v", err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err == nil {
			return ln, pc
		}
		ln.Close()
	}
	t.Fatal("testdns: no port free on both TCP and UDP")
	return nil, nil
}

// Addr is the server's host:port, for both UDP and TCP.
func (s *Server) Addr() string { return s.addr }

// Queries counts the questions answered so far; TCPQueries those that came over TCP.
func (s *Server) Queries() int64    { return s.queries.Load() }
func (s *Server) TCPQueries() int64 { return s.tcp.Load() }

func fqdn(name string) string { return dns.Fqdn(strings.ToLower(name)) }

// SetTXT replaces the TXT records at name with one record per value.
func (s *Server) SetTXT(name string, values ...string) {
	recs := make([][]string, len(values))
	for i, v := range values {
		recs[i] = []string{v}
	}
	s.setTXT(name, recs)
}

// SetTXTStrings replaces the TXT records at name with one record made of several
// character-strings (as long values are published), which a resolver joins.
func (s *Server) SetTXTStrings(name string, parts ...string) {
	s.setTXT(name, [][]string{parts})
}

func (s *Server) setTXT(name string, recs [][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txt[fqdn(name)] = recs
}

// SetCNAME makes name an alias of target.
func (s *Server) SetCNAME(name, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cname[fqdn(name)] = fqdn(target)
}

// Fail makes questions about name answer rcode (dns.RcodeServerFailure, dns.RcodeRefused…).
func (s *Server) Fail(name string, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[fqdn(name)] = rcode
}

// Remove deletes every record and failure set at name.
func (s *Server) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := fqdn(name)
	delete(s.txt, n)
	delete(s.cname, n)
	delete(s.fail, n)
}

// ServeDNS answers one question (dns.Handler).
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	s.answer(m, q)
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		size = int(opt.UDPSize())
		m.SetEdns0(opt.UDPSize(), false)
	}
	if w.LocalAddr().Network() == "udp" {
		m.Truncate(size)
	} else {
		s.tcp.Add(1)
	}
	_ = w.WriteMsg(m)
}

func (s *Server) answer(m *dns.Msg, q dns.Question) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(q.Name)
	if rc, ok := s.fail[name]; ok {
		m.Rcode = rc
		return
	}
	for range 8 {
		target, ok := s.cname[name]
		if !ok {
			break
		}
		m.Answer = append(m.Answer, &dns.CNAME{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET}, Target: target})
		if q.Qtype == dns.TypeCNAME {
			return
		}
		name = target
	}
	recs, ok := s.txt[name]
	if !ok {
		if len(m.Answer) == 0 {
			m.Rcode = dns.RcodeNameError
		}
		return
	}
	if q.Qtype != dns.TypeTXT {
		return // the name exists, with no record of that type
	}
	for _, parts := range recs {
		m.Answer = append(m.Answer, &dns.TXT{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: parts})
	}
}

var _ dns.Handler = (*Server)(nil)
