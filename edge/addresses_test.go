package edge_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"tollgate/edge"
	"tollgate/tenants"
)

// hostsDNS is a DNS server on loopback that answers A and AAAA questions from a table,
// so a test can make a name resolve wherever it likes.
type hostsDNS struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr // fqdn → addresses
}

func startHostsDNS(t *testing.T, hosts map[string][]string) *net.Resolver {
	t.Helper()
	s := &hostsDNS{addrs: map[string][]netip.Addr{}}
	for name, list := range hosts {
		for _, a := range list {
			s.addrs[dns.Fqdn(name)] = append(s.addrs[dns.Fqdn(name)], netip.MustParseAddr(a))
		}
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("dns server did not start")
	}
	t.Cleanup(func() { _ = srv.Shutdown() })
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func (s *hostsDNS) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range r.Question {
		list, ok := s.addrs[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 1}
		for _, a := range list {
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	_ = w.WriteMsg(m)
}

// A route whose target is a name is judged again at every dial, on every address the
// name resolves to: a name that resolves into a range the address rule refuses gets 502
// upstream_failed and is never connected to, even with a good address beside it. The
// edge's address rule here admits 127.0.0.0/8 only, as a development setup would.
func TestDialRefusesSpecialRanges(t *testing.T) {
	up := newUpstream(t, "up")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	resolver := startHostsDNS(t, map[string][]string{
		"good.test":      {"127.0.0.1"},
		"bench.test":     {"198.18.0.1"},
		"cgnat.test":     {"100.64.0.1"},
		"metadata.test":  {"169.254.169.254"},
		"nat64.test":     {"64:ff9b::a9fe:a9fe"},
		"sixtofour.test": {"2002:a00:1::1"},
		"ula.test":       {"fd00::1"},
		"mixed.test":     {"127.0.0.1", "10.0.0.1"},
		"mapped.test":    {"::ffff:192.168.0.1"},
		"teredo.test":    {"2001:0:4136:e378:8000:63bf:3fff:fdd2"},
	})
	h := newHarness(t)
	edge.SetResolver(h.e, resolver)
	tid := h.tenant("acme")
	names := []string{"good", "bench", "cgnat", "metadata", "nat64", "sixtofour", "ula", "mixed", "mapped", "teredo"}
	for _, n := range names {
		h.route(tid, "r-"+n, []string{"/" + n}, nil, tenants.AuthNone, fmt.Sprintf("http://%s.test:%s", n, port))
	}
	h.e.Loaded()
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/good"); r.status != 200 || r.echo == nil {
			return "the route to a name resolving to 127.0.0.1: " + r.String()
		}
		return ""
	})
	for _, n := range names[1:] {
		before := up.hits.Load()
		r := h.get("acme."+domain, "/"+n)
		if r.status != 502 || r.errCode() != tenants.EUpstreamFailed || !strings.Contains(r.body, "refused by the operator's policy") {
			t.Errorf("%s.test: want 502 upstream_failed refused by the address rule, got %s", n, r)
		}
		if up.hits.Load() != before {
			t.Errorf("%s.test: the upstream was reached", n)
		}
	}
	if n := h.metric("tollgate_edge_upstream_errors_total", map[string]string{"kind": "policy"}); n < float64(len(names)-1) {
		t.Errorf("policy refusals counted: %v, want %d", n, len(names)-1)
	}
}
