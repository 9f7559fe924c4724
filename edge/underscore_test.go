package edge_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// wireUpstream records the exact bytes of every request it gets (request line, header
// block, body and any trailer), as a CGI gateway in front of an application would read
// them. It answers 200, or 101 to a WebSocket upgrade.
type wireUpstream struct {
	url  string
	seen chan []byte
}

func newWireUpstream(t *testing.T) *wireUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &wireUpstream{url: "http://" + ln.Addr().String(), seen: make(chan []byte, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *wireUpstream) serve(c net.Conn) {
	defer c.Close()
	var rec bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &rec))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body) // reads the trailer too
		u.seen <- bytes.Clone(rec.Bytes())
		rec.Reset()
		if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

func (u *wireUpstream) next(t *testing.T) string {
	t.Helper()
	select {
	case b := <-u.seen:
		return string(b)
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got no request")
		return ""
	}
}

// underscoreLines returns the header (and trailer) lines of a raw request whose field
// name contains '_'.
func underscoreLines(raw string) []string {
	var out []string
	for _, line := range strings.Split(raw, "\r\n")[1:] {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.Contains(name, "_") {
			out = append(out, line)
		}
	}
	return out
}

// A request header whose name contains '_' never reaches an upstream: CGI-style servers
// would read X_Consumer_Id as HTTP_X_CONSUMER_ID, the variable the edge's own
// X-Consumer-Id fills. Checked on the wire, for plain requests, requests whose header
// spellings differ only in case, a chunked body with a trailer, and WebSocket upgrades.
func TestUnderscoreHeadersNeverReachUpstream(t *testing.T) {
	up := newWireUpstream(t)
	h := newHarness(t)
	tid := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c1", TenantID: tid, Name: "alice"})
	key := h.key(tid, "c1", "k1")
	h.route(tid, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.url)
	h.route(tid, "open", []string{"/open"}, nil, tenants.AuthNone, up.url)
	ws := &tenants.Route{ID: "ws", TenantID: tid, Name: "ws", Paths: []string{"/ws"}, Auth: tenants.AuthKey, WebSocket: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.url, Weight: 1}}}}
	h.put(ws)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/open"); r.status != 200 {
			return r.String()
		}
		up.next(t)
		return ""
	})

	forged := []string{
		"X_Consumer_Id: forged", "x_consumer_id: forged", "X_CONSUMER_NAME: forged", "X-Consumer_Id: forged",
		"X_Forwarded_For: 6.6.6.6", "X-Tollgate_Tenant: forged", "_: forged", "X_Api_Key: forged", "Remote_User: forged",
	}
	check := func(name, raw string, consumer bool) {
		t.Helper()
		if l := underscoreLines(raw); len(l) > 0 {
			t.Errorf("%s: underscore headers reached the upstream: %q", name, l)
		}
		if strings.Contains(raw, "forged") || strings.Contains(raw, "6.6.6.6") {
			t.Errorf("%s: a forged value reached the upstream:\n%s", name, raw)
		}
		head, _, _ := strings.Cut(raw, "\r\n\r\n")
		head += "\r\n"
		if !strings.Contains(head, "\r\nX-Fine: kept\r\n") {
			t.Errorf("%s: an ordinary header was dropped:\n%s", name, raw)
		}
		if consumer && !strings.Contains(head, "\r\nX-Consumer-Id: c1\r\n") {
			t.Errorf("%s: the edge's X-Consumer-Id is not among the headers:\n%s", name, raw)
		}
		if strings.Contains(head, "\r\nTrailer:") {
			t.Errorf("%s: a trailer is announced:\n%s", name, raw)
		}
	}

	r := h.get(host, "/keyed", append([]string{"X-API-Key: " + key, "X-Fine: kept"}, forged...)...)
	if r.status != 200 {
		t.Fatalf("keyed: %s", r)
	}
	check("keyed GET", up.next(t), true)

	r = h.get(host, "/open", append([]string{"X-Fine: kept"}, forged...)...)
	if r.status != 200 {
		t.Fatalf("open: %s", r)
	}
	check("open GET", up.next(t), false)

	// Spellings a lenient parser could split another way: refused with 400, or kept
	// inside the value of the header line they continue (obsolete line folding).
	for _, hdr := range [][]string{
		{"X_Consumer_Id : forged"}, {"X-Consumer-Id\t: forged"}, {"X_Consumer_Id\x00: forged"},
		{"X-Foo: a", " X_Consumer_Id: forged"}, {"X-Foo: a", "\tX-Consumer-Id: forged"},
	} {
		r := h.get(host, "/open", hdr...)
		if r.status == 400 && r.errCode() == tenants.EInvalidRequest {
			continue
		}
		if r.status != 200 {
			t.Fatalf("%q: %s", hdr, r)
		}
		raw := up.next(t)
		if l := underscoreLines(raw); len(l) > 0 || strings.Contains(raw, "\r\nX-Consumer-Id:") {
			t.Errorf("%q reached the upstream as a header of its own:\n%s", hdr, raw)
		}
	}

	// A chunked body whose trailer carries the forged names as well.
	body := "5\r\nhello\r\n0\r\nX_Consumer_Id: forged\r\nX-Consumer-Id: forged\r\n\r\n"
	r = send(t, h.public, "POST", host, "/keyed",
		append([]string{"X-API-Key: " + key, "X-Fine: kept", "Transfer-Encoding: chunked", "Trailer: X_Consumer_Id"}, forged...), body)
	if r.status != 200 {
		t.Fatalf("chunked POST: %s", r)
	}
	check("chunked POST with trailer", up.next(t), true)

	// A WebSocket upgrade goes upstream as a tunnel the edge writes itself.
	c, err := net.Dial("tcp", h.public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-API-Key: %s\r\nX-Fine: kept\r\n%s\r\n\r\n",
		host, key, strings.Join(forged, "\r\n"))
	check("WebSocket upgrade", up.next(t), true)
}

// foldsToEdgeHeader reports a header name that, with every byte other than a letter or
// digit read as "-" and in any case, is one the edge sets for the upstream, or
// X-Tollgate-*.
func foldsToEdgeHeader(name string) bool {
	f := []byte(strings.ToLower(name))
	for i, c := range f {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			f[i] = '-'
		}
	}
	switch s := string(f); s {
	case "x-consumer-id", "x-consumer-name", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host",
		"x-request-id", "x-real-ip", "x-api-key":
		return true
	default:
		return strings.HasPrefix(s, "x-tollgate-")
	}
}

// A request header spelled like one the edge sets but with other punctuation (X.Consumer.Id,
// X~Consumer~Id, X!Consumer!Id, any case) never reaches an upstream: servers that fold
// punctuation to "_" or "-" would read it as the edge's own. Ordinary names with such
// punctuation, and the edge's own headers, still arrive.
func TestPunctuatedIdentityHeadersNeverReachUpstream(t *testing.T) {
	up := newWireUpstream(t)
	h := newHarness(t)
	tid := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c1", TenantID: tid, Name: "alice"})
	key := h.key(tid, "c1", "k1")
	h.route(tid, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.url)
	h.route(tid, "open", []string{"/open"}, nil, tenants.AuthNone, up.url)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/open"); r.status != 200 {
			return r.String()
		}
		up.next(t)
		return ""
	})
	forged := []string{
		"X.Consumer.Id: forged", "X~Consumer~Id: forged", "X!Consumer!Id: forged", "x.CONSUMER-id: forged",
		"X-Consumer.Name: forged", "X|Consumer|Name: forged", "X.Forwarded.For: 6.6.6.6", "X'Forwarded'Host: forged",
		"X^Forwarded^Proto: forged", "X.Request.Id: forged", "X#Real#Ip: forged", "X.Tollgate.Tenant: forged",
		"X*Api*Key: forged", "X`Consumer`Id: forged", "X+Consumer+Id: forged", "X&Consumer&Id: forged",
	}
	for _, c := range []struct {
		path     string
		keyed    bool
		extraHdr []string
	}{{"/open", false, nil}, {"/keyed", true, []string{"X-API-Key: " + key}}} {
		r := h.get(host, c.path, append(append([]string{"X-Fine: kept", "X.Fine.Too: kept", "Accept: */*"}, c.extraHdr...), forged...)...)
		if r.status != 200 {
			t.Fatalf("%s: %s", c.path, r)
		}
		raw := up.next(t)
		head, _, _ := strings.Cut(raw, "\r\n\r\n")
		if strings.Contains(raw, "forged") || strings.Contains(raw, "6.6.6.6") {
			t.Errorf("%s: a forged value reached the upstream:\n%s", c.path, raw)
		}
		for _, line := range strings.Split(head, "\r\n")[1:] {
			name, _, _ := strings.Cut(line, ":")
			if foldsToEdgeHeader(name) && !slices.Contains([]string{"X-Consumer-Id", "X-Consumer-Name", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Request-Id"}, name) {
				t.Errorf("%s: %q reached the upstream", c.path, line)
			}
		}
		for _, want := range []string{"X-Fine: kept", "X.Fine.Too: kept"} {
			if !strings.Contains(strings.ToLower(head+"\r\n"), "\r\n"+strings.ToLower(want)+"\r\n") {
				t.Errorf("%s: an ordinary header was dropped (%s):\n%s", c.path, want, raw)
			}
		}
		if c.keyed && !strings.Contains(head+"\r\n", "\r\nX-Consumer-Id: c1\r\n") {
			t.Errorf("%s: the edge's X-Consumer-Id is missing:\n%s", c.path, raw)
		}
	}
}
