package websocket

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestIsUpgrade(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nconnection: keep-alive, UPGRADE\r\nupgrade: WebSocket\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", false},                  // no Connection: upgrade
		{"GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", false}, // another protocol
		{"GET / HTTP/1.1\r\nConnection: upgraded\r\nUpgrade: websocket\r\n\r\n", false},
		{"", false},
	} {
		if got := IsUpgrade([]byte(c.raw)); got != c.want {
			t.Errorf("IsUpgrade(%q) = %v, want %v", c.raw, got, c.want)
		}
	}
}

// TestAck: the client's 101 keeps the headers the caller allows, sets Connection and
// Upgrade again, adds the caller's header and carries the upstream's early bytes.
func TestAck(t *testing.T) {
	answer := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: abc\r\nKeep-Alive: timeout=5\r\n\r\n\x81\x02hi"
	br := bufio.NewReader(strings.NewReader(answer))
	var resp fasthttp.Response
	if err := resp.ReadLimitBody(br, 1<<20); err != nil {
		t.Fatal(err)
	}
	// fasthttp hands header names over normalized.
	keep := func(k []byte) bool { return string(k) == "Sec-Websocket-Accept" }
	ack, early := Ack(&resp, keep, []byte("X-Request-Id"), []byte("r1"), br)
	want := "HTTP/1.1 101 Switching Protocols\r\nSec-Websocket-Accept: abc\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"X-Request-Id: r1\r\n\r\n\x81\x02hi"
	if string(ack) != want || early != 4 {
		t.Fatalf("Ack = %q, %d\nwant %q, 4", ack, early, want)
	}
}

func FuzzIsUpgrade(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"))
	f.Add([]byte("Connection: ,,upgrade,\r\nUpgrade:websocket , x\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := IsUpgrade(raw)
		// Both headers must be there for an upgrade: a block without either is not one.
		l := strings.ToLower(string(raw))
		if got && (!strings.Contains(l, "upgrade") || !strings.Contains(l, "websocket") || !strings.Contains(l, "connection")) {
			t.Fatalf("IsUpgrade(%q) = true without the upgrade headers", raw)
		}
	})
}
