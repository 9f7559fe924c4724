package conn

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A tunnel's connection is read by one goroutine while another writes it, and a Close
// from a third ends a blocked read: with raw I/O on (outside race builds) and off.
func TestTunnel(t *testing.T) {
	for _, raw := range []bool{true, false} {
		prev := RawIO()
		SetRawIO(raw)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(c, c) // echo
		}()
		d, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c := Tunnel(d)
		if _, isRaw := c.(*tunnelConn); isRaw != RawIO() {
			t.Errorf("raw %v: got %T", RawIO(), c)
		}
		msg := bytes.Repeat([]byte("x"), 64<<10)
		done := make(chan error, 1)
		go func() { _, err := c.Write(msg); done <- err }()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("raw %v: echo %v", raw, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(50 * time.Millisecond); c.Close() }()
		if _, err := c.Read(got); err == nil {
			t.Errorf("raw %v: read after Close succeeded", raw)
		}
		ln.Close()
		SetRawIO(prev)
	}
}
