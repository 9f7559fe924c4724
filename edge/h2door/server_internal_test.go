package h2door

import (
	"bufio"
	"net/http"
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
