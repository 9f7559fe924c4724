// Package websocket relays WebSocket tunnels for the edge: it recognises an upgrade
// request, opens the upstream side (dial, TLS, the upgrade request and its answer), and,
// once the client connection is handed over, copies bytes both ways until either side
// closes, the tunnel idles or outlives its time, or the edge shuts down.
//
// The edge's step decides (route, authentication, limits, the target) and hands over;
// this package does not parse frames: it relays bytes. A tunnel closes when it has
// carried no byte either way for its idle timeout, when it has lived its maximum
// lifetime, and on Shutdown; the client then gets a close frame (1001 going away) and
// both connections close. (The close frame is sent between two relayed writes; should
// the upstream be in the middle of a frame at that moment the client sees a protocol
// error rather than 1001, which ends the connection just the same.)
package websocket

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/routing"
)

var (
	hdrUpgrade    = []byte("Upgrade")
	hdrConnection = []byte("Connection")
	tokWebSocket  = []byte("websocket")
	tokUpgrade    = []byte("upgrade")
	upgradeHeads  = []byte("Connection: Upgrade\r\nUpgrade: websocket\r\n")
	status101     = []byte("HTTP/1.1 101 Switching Protocols\r\n")
	// closeGoingAway is a server close frame (unmasked) with code 1001.
	closeGoingAway = []byte{0x88, 0x02, 0x03, 0xe9}
)

// IsUpgrade looks for Upgrade: websocket and a Connection naming upgrade in a raw
// request header block (a parsed header has lost both: they are hop-by-hop).
func IsUpgrade(raw []byte) bool {
	var up, conn bool
	for len(raw) > 0 {
		var k, v []byte
		k, v, raw = routing.NextHeader(raw)
		switch {
		case k == nil:
		case bytes.EqualFold(k, hdrUpgrade):
			up = up || hasToken(v, tokWebSocket)
		case bytes.EqualFold(k, hdrConnection):
			conn = conn || hasToken(v, tokUpgrade)
		}
	}
	return up && conn
}

// hasToken reports whether a comma-separated header value holds tok (case-insensitive).
func hasToken(v, tok []byte) bool {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		if bytes.EqualFold(bytes.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// Dial opens a tunnel's upstream side: it dials addr, speaks TLS over it when useTLS,
// sends the upgrade request (head: the request's header block, ending with its blank
// line, without Connection and Upgrade, which Dial adds) and reads the answer's head
// into resp, all before deadline. On success the caller owns up, and br holds what the
// upstream sent after its answer's head; on error up is closed.
func Dial(dial func(addr string, timeout time.Duration) (net.Conn, error), addr string, connectTimeout time.Duration,
	useTLS bool, head []byte, resp *fasthttp.Response, deadline time.Time) (up net.Conn, br *bufio.Reader, err error) {
	up, err = dial(addr, connectTimeout)
	if err != nil {
		return nil, nil, err
	}
	up = conn.Tunnel(up) // the tunnel reads and writes it from two goroutines
	if useTLS {
		host, _, _ := net.SplitHostPort(addr)
		tc := tls.Client(up, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
		_ = tc.SetDeadline(deadline)
		if err := tc.Handshake(); err != nil {
			_ = up.Close()
			return nil, nil, err
		}
		up = tc
	}
	_ = up.SetDeadline(deadline)
	out := make([]byte, 0, len(head)+len(upgradeHeads))
	out = append(out, head[:len(head)-2]...)
	out = append(out, upgradeHeads...)
	out = append(out, "\r\n"...)
	if _, err := up.Write(out); err != nil {
		_ = up.Close()
		return nil, nil, err
	}
	br = bufio.NewReaderSize(up, 4<<10)
	if err := resp.ReadLimitBody(br, 1<<20); err != nil {
		_ = up.Close()
		return nil, nil, err
	}
	_ = up.SetDeadline(time.Time{})
	return up, br, nil
}

// Ack is what the client gets for an upstream's 101 in resp: its status line, the
// response headers keep allows (the caller drops hop-by-hop ones; Connection and
// Upgrade are set again), the header name: value the edge adds, and the bytes the
// upstream sent right behind its 101 (early of them), read from br.
func Ack(resp *fasthttp.Response, keep func(k []byte) bool, name, value []byte, br *bufio.Reader) (ack []byte, early int) {
	ack = append([]byte(nil), status101...)
	for k, v := range resp.Header.All() {
		if keep(k) {
			ack = append(ack, k...)
			ack = append(ack, ": "...)
			ack = append(ack, v...)
			ack = append(ack, "\r\n"...)
		}
	}
	ack = append(ack, upgradeHeads...)
	ack = append(ack, name...)
	ack = append(ack, ": "...)
	ack = append(ack, value...)
	ack = append(ack, "\r\n\r\n"...)
	early = br.Buffered()
	if early > 0 {
		b, _ := br.Peek(early)
		ack = append(ack, b...)
	}
	return ack, early
}
