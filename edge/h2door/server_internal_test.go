package h2door

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// The adapter must not crash on what a client can put in a stream's pseudo-headers.
func TestH2AdapterBadTarget(t *testing.T) {
	var hx exchange
	hx.br = bufio.NewReaderSize(&hx.rd, 4096)
	for _, target := range []string{"/a b", "/a\r\nX-Consumer-Id: x", "/\x00"} {
		r := &http.Request{Method: "GET", RequestURI: target, Host: "acme.edge.test", Header: http.Header{}, Body: http.NoBody}
		if err := hx.readRequest(r); err == nil {
			t.Errorf("%q: accepted", target)
		}
	}
	r := &http.Request{Method: "GET", RequestURI: "/ok", Host: "acme.edge.test", Header: http.Header{"X-A": {"1"}}, Body: http.NoBody}
	if err := hx.readRequest(r); err != nil {
		t.Fatal(err)
	}
	if got := string(hx.ctx.Request.Header.Peek("X-A")); got != "1" {
		t.Errorf("X-A = %q", got)
	}
}

// FuzzReadRequest: whatever a client puts in a stream's pseudo-headers and fields, the
// rebuilt request is refused or is exactly that request: its method, target and Host as
// sent, and no field that was not sent.
func FuzzReadRequest(f *testing.F) {
	f.Add("GET", "/a?b=c", "acme.edge.test", "X-A", "1")
	f.Add("POST", "/a b", "h", "X-A", "v\r\nX-Consumer-Id: x")
	f.Add("PROPFIND", "*", "h:80", "Transfer-Encoding", "chunked")
	f.Fuzz(func(t *testing.T, method, target, host, name, value string) {
		var hx exchange
		hx.br = bufio.NewReaderSize(&hx.rd, 4096)
		r := &http.Request{Method: method, RequestURI: target, Host: host, Header: http.Header{name: {value}}, Body: http.NoBody}
		if err := hx.readRequest(r); err != nil {
			return
		}
		h := &hx.ctx.Request.Header
		if string(h.Method()) != method || string(h.RequestURI()) != target || string(h.Host()) != host {
			t.Fatalf("%q %q %q became %q %q %q", method, target, host, h.Method(), h.RequestURI(), h.Host())
		}
		if v := h.Peek("X-Consumer-Id"); v != nil && !strings.EqualFold(name, "X-Consumer-Id") {
			t.Fatalf("field %q: %q became an X-Consumer-Id", name, value)
		}
	})
}
