package conn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// tunnelPair returns the two ends of a loopback TCP connection, the first as Tunnel
// makes it.
func tunnelPair(t testing.TB) (tunnel, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p := <-accepted
	if p == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); p.Close() })
	return Tunnel(d), p
}

// withSettings runs f with raw I/O and the short-read wait each on and off.
func withSettings(t *testing.T, f func(t *testing.T)) {
	defer SetRawIO(RawIO())
	defer SetShortReadWait(ShortReadWait())
	for _, raw := range []bool{true, false} {
		for _, wait := range []bool{true, false} {
			SetRawIO(raw)
			SetShortReadWait(wait)
			name := map[bool]string{true: "raw", false: "netconn"}[RawIO()] + "/" + map[bool]string{true: "wait", false: "drain"}[wait]
			t.Run(name, f)
		}
	}
}

// Every byte arrives once and in order, whether it comes in bursts larger than the
// buffer, in small messages with pauses between them (each read empties the socket, so
// the relay waits for the poller), or right behind such a read; the peer's close ends
// the relay with io.EOF.
func TestRelay(t *testing.T) {
	withSettings(t, func(t *testing.T) {
		tun, peer := tunnelPair(t)
		var want bytes.Buffer
		go func() {
			defer peer.Close()
			write := func(b []byte) {
				want.Write(b)
				if _, err := peer.Write(b); err != nil {
					t.Error(err)
				}
			}
			write(bytes.Repeat([]byte("burst."), 5000)) // 30,000 bytes: several full reads
			for i := range 50 {
				write([]byte{'m', byte('0' + i%10)})
				if i%5 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		var got bytes.Buffer
		err := Relay(tun, make([]byte, 4096), func(b []byte) error {
			got.Write(b)
			return nil
		})
		if err != io.EOF {
			t.Errorf("Relay returned %v; want io.EOF", err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("relayed %d bytes, not the %d written", got.Len(), want.Len())
		}
	})
}

// Data and the peer's FIN queued together, which the poller reports once: the relay
// delivers the data and ends with io.EOF rather than waiting for a report that will not
// come.
func TestRelayDataThenFIN(t *testing.T) {
	withSettings(t, func(t *testing.T) {
		tun, peer := tunnelPair(t)
		for i := range 3 {
			if _, err := peer.Write([]byte("last words")); err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				peer.Close()
			}
			time.Sleep(5 * time.Millisecond) // all queued before the relay reads
		}
		var got bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- Relay(tun, make([]byte, 64), func(b []byte) error { got.Write(b); return nil })
		}()
		select {
		case err := <-done:
			if err != io.EOF || got.String() != strings.Repeat("last words", 3) {
				t.Errorf("Relay returned %v after %q; want io.EOF after the data", err, got.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Relay still waiting 10 s after the peer's FIN")
		}
	})
}

// deliver's error ends the relay and is returned; a Close from another goroutine ends a
// relay that waits, with net.ErrClosed.
func TestRelayEnds(t *testing.T) {
	withSettings(t, func(t *testing.T) {
		tun, peer := tunnelPair(t)
		stop := errors.New("stop")
		if _, err := peer.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := Relay(tun, make([]byte, 64), func([]byte) error { return stop }); err != stop {
			t.Errorf("deliver failed: Relay returned %v", err)
		}
		go func() { time.Sleep(20 * time.Millisecond); tun.Close() }()
		err := Relay(tun, make([]byte, 64), func([]byte) error { return nil })
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("closed while waiting: Relay returned %v; want net.ErrClosed", err)
		}
	})
}

// BenchmarkRelay times a 38-byte message (S6's frame) relayed and echoed back: the
// relay reads the tunnel's end and writes each read back to it. With the short-read wait
// (the default) each message is one read and one write; draining adds the read that
// finds nothing. Compare -bench 'Relay/wait' with 'Relay/drain' (-cpu 1, as the edge
// runs on one core).
func BenchmarkRelay(b *testing.B) {
	defer SetRawIO(RawIO())
	defer SetShortReadWait(ShortReadWait())
	SetRawIO(true)
	if !RawIO() {
		b.Skip("raw I/O is off in race-detector builds")
	}
	for _, wait := range []bool{true, false} {
		name := map[bool]string{true: "wait", false: "drain"}[wait]
		b.Run(name, func(b *testing.B) {
			SetShortReadWait(wait)
			tun, peer := tunnelPair(b)
			done := make(chan error, 1)
			go func() {
				done <- Relay(tun, make([]byte, 4096), func(p []byte) error {
					_, err := tun.Write(p)
					return err
				})
			}()
			msg, back := bytes.Repeat([]byte("f"), 38), make([]byte, 38)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := peer.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(peer, back); err != nil {
					b.Fatal(err)
				}
			}
			peer.Close()
			<-done
		})
	}
}
