package upstreamh2_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tollgate/edge/upstreamh2"
)

// leanServer answers every request on its connections as a gRPC server answers a
// unary call, HEADERS, one DATA and the trailer fields, framed by hand on one
// goroutine a connection. It runs in a process of its own (this test binary again, which
// TestMain turns into the server), so that the benchmark's process CPU time is the
// client's.
func leanServer(b *testing.B) string {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "UPSTREAMH2_LEAN_SERVER=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = in.Close() // the server's signal to end
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return strings.TrimSpace(addr)
}

// TestMain runs the tests, or leanServer's process when the benchmark starts this binary
// as its server: it serves until its stdin closes.
func TestMain(m *testing.M) {
	if os.Getenv("UPSTREAMH2_LEAN_SERVER") == "" {
		os.Exit(m.Run())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer ln.Close()
	fmt.Println(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveLean(c)
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func serveLean(c net.Conn) {
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	var out bytes.Buffer
	fr := http2.NewFramer(&out, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSizeLimit(0)
	block := func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	head, trailer := block(":status", "200", "content-type", "application/grpc"), block("grpc-status", "0")
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1000})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	answer := []byte{0, 0, 0, 0, 2, 8, 1}
	var unacked uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			if unacked += f.Length; unacked > 1<<20 {
				_ = fr.WriteWindowUpdate(0, unacked)
				unacked = 0
			}
			if f.StreamEnded() {
				id := f.StreamID
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: head, EndHeaders: true})
				_ = fr.WriteData(id, false, answer)
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: trailer, EndHeaders: true, EndStream: true})
			}
		}
		if out.Len() > 0 {
			if _, err := c.Write(out.Bytes()); err != nil {
				return
			}
			out.Reset()
		}
	}
}

// BenchmarkUnary: a unary gRPC call as the proxy makes it (NewRequest, RoundTrip, the
// body read to its trailer fields), over loopback to a lean server in another process,
// with the edge's own client and with Go's transport, one call at a time and 16 at once.
// cpu-ns/op is this process's CPU time per call, user and system: the client's, not the
// server's. go test -run '^$' -bench BenchmarkUnary -benchtime 20000x ./edge/upstreamh2/
func BenchmarkUnary(b *testing.B) {
	addr := leanServer(b)
	for _, kind := range []struct {
		name string
		goT  bool
	}{{"own", false}, {"go", true}} {
		h := newTransport(b, addr, func(c *upstreamh2.Config) { c.GoTransport, c.MaxInFlight = kind.goT, 1024 })
		body := []byte{0, 0, 0, 0, 5, 10, 3, 'a', 'b', 'c'}
		// The client's head, as the door parsed it, is the same for every call.
		var rh fasthttp.RequestHeader
		rh.SetMethod("POST")
		for _, kv := range [][2]string{{"Content-Type", "application/grpc"}, {"User-Agent", "grpc-go/1.85.0"},
			{"Grpc-Timeout", "5S"}, {"X-Request-Id", "40a195057461000000000069"}, {"X-Forwarded-For", "10.1.2.3"}} {
			rh.Add(kv[0], kv[1])
		}
		call := func(buf []byte) {
			r, err := h.NewRequest(context.Background(), &rh, []byte("/grpc.health.v1.Health/Check"), []byte("upstream.test"),
				upstreamh2.NewRequestBody(bytes.NewReader(body), 1<<20), int64(len(body)))
			if err != nil {
				b.Fatal(err)
			}
			res, err := h.RoundTrip(r)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := res.Body.Read(buf); err != nil {
					if err != io.EOF {
						b.Fatal(err)
					}
					break
				}
			}
			if res.Trailer.Get("Grpc-Status") != "0" {
				b.Fatalf("trailer %v", res.Trailer)
			}
			_ = res.Body.Close()
		}
		b.Run(kind.name+"/serial", func(b *testing.B) {
			buf := make([]byte, 512)
			call(buf)
			b.ReportAllocs()
			start := cpuNow()
			b.ResetTimer()
			for range b.N {
				call(buf)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		})
		b.Run(kind.name+"/parallel16", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8) // 16 goroutines on the 2 cores this runs on
			start := cpuNow()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 512)
				for pb.Next() {
					call(buf)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuNow is the process's CPU time so far, user and system, in nanoseconds.
func cpuNow() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
