// Package wsload is the child-process side of S6, the bench's WebSocket scenario: an echo
// upstream, and a client that opens many tunnels through the gateway, reports, waits for
// the go-ahead on its stdin and then sends a trickle of messages over them, reporting the
// round trips as JSON on its stdout. It speaks just enough of RFC 6455 for that.
package wsload

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/e2e/bench/harness"
)

// wsAcceptKey is the Sec-WebSocket-Accept for a client's key (RFC 6455 4.2.2).
func wsAcceptKey(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// RunEcho is the echo upstream's main: plain requests get 200 "ok"; an upgrade gets
// 101 and then every frame back, unmasked, as a server sends it.
func RunEcho(addr string) int {
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			io.WriteString(w, "ok")
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			wsAcceptKey(r.Header.Get("Sec-WebSocket-Key")))
		if rw.Flush() != nil {
			return
		}
		buf := make([]byte, 0, 256)
		for {
			op, payload, err := readFrame(rw.Reader, buf)
			if err != nil || op == 0x8 {
				return
			}
			if err := writeFrame(rw.Writer, op, payload, nil); err != nil || rw.Flush() != nil {
				return
			}
			buf = payload[:0]
		}
	})}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "wsecho:", err)
		return 1
	}
	return 0
}

// readFrame reads one frame (payloads below 64 KiB) and unmasks it into buf.
func readFrame(r *bufio.Reader, buf []byte) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(ext[:]))
	} else if n == 127 {
		return 0, nil, errors.New("frame too large for the bench")
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = slices.Grow(buf[:0], n)[:n]
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i&3]
		}
	}
	return h[0] & 0x0f, payload, nil
}

// writeFrame writes one final frame; a client masks (mask non-nil), a server does not.
func writeFrame(w io.Writer, op byte, payload []byte, mask []byte) error {
	frame := make([]byte, 0, 8+len(payload))
	frame = append(frame, 0x80|op)
	bit := byte(0)
	if mask != nil {
		bit = 0x80
	}
	if len(payload) < 126 {
		frame = append(frame, bit|byte(len(payload)))
	} else {
		frame = append(frame, bit|126, byte(len(payload)>>8), byte(len(payload)))
	}
	if mask != nil {
		frame = append(frame, mask[:4]...)
		for i, c := range payload {
			frame = append(frame, c^mask[i&3])
		}
	} else {
		frame = append(frame, payload...)
	}
	_, err := w.Write(frame)
	return err
}

// Spec is the WebSocket client's task.
type Spec struct {
	Addr     string        `json:"addr"`
	Host     string        `json:"host"`
	Path     string        `json:"path"`
	Conns    int           `json:"conns"`
	Rate     int           `json:"rate"` // messages per second over all tunnels
	Duration time.Duration `json:"duration"`
}

// Opened is the client's first report: every tunnel is up.
type Opened struct {
	Opened  int     `json:"opened"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// Result is the client's second report: the trickle's round trips (µs).
type Result struct {
	Opened             int     `json:"opened"`
	Sent               int64   `json:"sent"`
	Received           int64   `json:"received"`
	Errors             int64   `json:"errors"`
	P50, P99, Max      float64 `json:",omitempty"`
	TrickleSeconds     float64 `json:"trickle_seconds"`
	OpenSeconds        float64 `json:"open_seconds"`
	ClosedByTheGateway int64   `json:"closed_by_the_gateway"`
}

// RunClient is the client's main (see the package's doc); in is the rest of stdin.
func RunClient(spec *Spec, in io.Reader) int {
	out := json.NewEncoder(os.Stdout)
	type tunnel struct {
		c  net.Conn
		br *bufio.Reader
	}
	tunnels := make([]tunnel, spec.Conns)
	start := time.Now()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		openErr error
	)
	// A few at a time: the gateway's accept queue, not the client, sets the pace.
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= spec.Conns {
					return
				}
				c, br, err := wsDial(spec)
				if err != nil {
					errOnce.Do(func() { openErr = fmt.Errorf("tunnel %d: %w", i, err) })
					return
				}
				tunnels[i] = tunnel{c, br}
			}
		}()
	}
	wg.Wait()
	opened := 0
	for _, t := range tunnels {
		if t.c != nil {
			opened++
		}
	}
	openSecs := time.Since(start).Seconds()
	rep := Opened{Opened: opened, Seconds: openSecs}
	if openErr != nil {
		rep.Error = openErr.Error()
	}
	_ = out.Encode(rep)
	if opened < spec.Conns {
		return 1
	}
	rd := bufio.NewReader(in)
	for {
		// The first line may be the rest of the spec's own line.
		line, err := rd.ReadString('\n')
		if err != nil {
			return 1
		}
		if l := strings.TrimSpace(line); l == "go" {
			break
		} else if l != "" {
			fmt.Fprintf(os.Stderr, "ws client: want \"go\", got %q\n", l)
			return 1
		}
	}

	res := Result{Opened: opened, OpenSeconds: openSecs}
	var (
		mu       sync.Mutex
		lat      []float64
		received atomic.Int64
		errs     atomic.Int64
		closed   atomic.Int64
		readers  sync.WaitGroup
	)
	for _, t := range tunnels {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 0, 64)
			for {
				_, payload, err := readFrame(t.br, buf)
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						closed.Add(1) // the gateway (or upstream) ended the tunnel
					}
					return
				}
				if len(payload) >= 8 {
					sent := int64(binary.BigEndian.Uint64(payload))
					us := float64(time.Now().UnixNano()-sent) / 1e3
					mu.Lock()
					lat = append(lat, us)
					mu.Unlock()
				}
				received.Add(1)
			}
		}()
	}
	n := int(float64(spec.Rate) * spec.Duration.Seconds())
	payload := make([]byte, 32)
	mask := []byte{0x12, 0x34, 0x56, 0x78}
	t0 := time.Now()
	for i := range n {
		due := t0.Add(time.Duration(float64(i) / float64(spec.Rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		t := tunnels[i%len(tunnels)]
		_ = t.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := writeFrame(t.c, 0x1, payload, mask); err != nil {
			errs.Add(1)
		}
		res.Sent++
	}
	// Answers still in flight get a moment to arrive.
	for deadline := time.Now().Add(3 * time.Second); received.Load() < res.Sent && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.TrickleSeconds = time.Since(t0).Seconds()
	res.Received, res.Errors, res.ClosedByTheGateway = received.Load(), errs.Load(), closed.Load()
	mu.Lock()
	slices.Sort(lat)
	if len(lat) > 0 {
		pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		res.P50, res.P99, res.Max = pct(0.5), pct(0.99), lat[len(lat)-1]
	}
	mu.Unlock()
	_ = out.Encode(res)
	// The tunnels stay open until the bench has read the gateway's figures.
	_, _ = io.Copy(io.Discard, rd)
	for _, t := range tunnels {
		t.c.Close()
	}
	readers.Wait()
	return 0
}

// wsDial opens one tunnel through the gateway.
func wsDial(spec *Spec) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", spec.Addr, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	key := base64.StdEncoding.EncodeToString([]byte(harness.RandomHex(8)))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n",
		spec.Path, spec.Host, key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAcceptKey(key) {
		c.Close()
		return nil, nil, fmt.Errorf("upgrade answered %s (accept %q)", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}
