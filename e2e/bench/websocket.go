package main

// S6: many long-lived WebSocket tunnels through the gateway with a trickle of messages.
//
// The bench runs two processes of its own on the load CPUs: an echo upstream
// (TOLLGATE_BENCH_WSECHO=<addr>) and a client (the load generator with a ws spec) that
// opens -ws-conns tunnels, reports, waits for the go-ahead, sends -ws-rate messages per
// second spread over every tunnel for the window, and reports the round trips. The
// gateway's RSS before and after the tunnels open gives memory per tunnel; its CPU time
// over the opening and over the trickle gives CPU per upgrade and per message (one
// message is a frame each way: client → gateway → upstream and back).
//
// Between the two the bench waits -ws-settle with the tunnels idle, and reports the
// gateway's CPU in that wait apart: work a gateway does once after a burst (the edge's
// memory return, edge/memory.go: two collections, which scan every tunnel's two
// goroutine stacks, then the pages handed back) is not a cost of the messages that
// happen to follow it.

import (
	"bufio"
	"context"
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
	"os/exec"
	"path/filepath"
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

// startWSEcho starts the echo upstream on a free port, pinned to the load CPUs.
func (b *bench) startWSEcho(ctx context.Context) error {
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := harness.StartProc("websocket echo upstream", filepath.Join(b.Dir, "wsecho.log"), b.LoadCPUs,
		append(os.Environ(), "TOLLGATE_BENCH_WSECHO="+addr), self)
	if err != nil {
		return err
	}
	b.Clean.Add(p.Stop)
	if err := b.WaitHTTP(ctx, "websocket echo upstream", "http://"+addr+"/", 10*time.Second, p); err != nil {
		return err
	}
	b.WSPort = port
	return nil
}

// runWSEcho is the echo upstream's main: plain requests get 200 "ok"; an upgrade gets
// 101 and then every frame back, unmasked, as a server sends it.
func runWSEcho(addr string) int {
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

// wsSpec is the WebSocket client's task.
type wsSpec struct {
	Addr     string        `json:"addr"`
	Host     string        `json:"host"`
	Path     string        `json:"path"`
	Conns    int           `json:"conns"`
	Rate     int           `json:"rate"` // messages per second over all tunnels
	Duration time.Duration `json:"duration"`
}

// wsOpened is the client's first report: every tunnel is up.
type wsOpened struct {
	Opened  int     `json:"opened"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// wsClientResult is the client's second report: the trickle's round trips (µs).
type wsClientResult struct {
	Opened             int     `json:"opened"`
	Sent               int64   `json:"sent"`
	Received           int64   `json:"received"`
	Errors             int64   `json:"errors"`
	P50, P99, Max      float64 `json:",omitempty"`
	TrickleSeconds     float64 `json:"trickle_seconds"`
	OpenSeconds        float64 `json:"open_seconds"`
	ClosedByTheGateway int64   `json:"closed_by_the_gateway"`
}

// runWSClient is the client's main (see the top of the file); in is the rest of stdin.
func runWSClient(spec *wsSpec, in io.Reader) int {
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
	rep := wsOpened{Opened: opened, Seconds: openSecs}
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

	res := wsClientResult{Opened: opened, OpenSeconds: openSecs}
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
func wsDial(spec *wsSpec) (net.Conn, *bufio.Reader, error) {
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

// wsResult is S6 on one gateway.
type wsResult struct {
	gateway       string
	procs         int
	round         int
	client        wsClientResult
	rss0, rss1    int64 // KB: before the tunnels, with them open (after the trickle: rss2)
	rss2          int64
	rssSettled    int64 // KB: with them open, after -ws-settle
	usPerUpgrade  float64
	usPerMsg      float64
	trickleCPUSec float64
	settleCPUSec  float64  // CPU during -ws-settle, the tunnels open and idle
	sys0, sys1    cpuTimes // every CPU's busy and total ticks around the trickle (/proc/stat)
}

func (w wsResult) kibPerConn() float64 {
	if w.client.Opened == 0 {
		return 0
	}
	return float64(w.rss1-w.rss0) / float64(w.client.Opened)
}

// asPerf states an S6 measurement in a request measurement's terms, for -compare's rounds:
// a message echoed stands for a request (usPerReq is CPU µs per message, the QPS messages
// per second). why is not empty when the trickle did not run as asked, so its CPU per
// message is not comparable: messages lost or tunnels closed by the gateway, the client
// sent under 95% of what -ws-rate asked for (the load side fell behind), or other
// processes ran at least 5% of the time on the gateway's CPUs not shared with the load
// side (/proc/stat's process time over the trickle, less the gateway's own): a wake-up,
// most of what a message costs, costs more on a CPU that others keep busy. Process time,
// not busy time, because the softirqs of the gateway's own loopback writes (the peer's
// TCP receive, done on the sender's CPU) are busy time that no process is charged for.
func (w wsResult) asPerf(rate int, gwCPUs, loadCPUs []int) (r perfResult, why string) {
	r = perfResult{scenario: "S6", gateway: w.gateway, procs: w.procs, cpuSec: w.trickleCPUSec, usPerReq: w.usPerMsg, rssKB: w.rss2,
		sys0: w.sys0, sys1: w.sys1,
		load: loadResult{Requests: w.client.Received, DurationUS: int64(w.client.TrickleSeconds * 1e6), P50: w.client.P50, P99: w.client.P99, Max: w.client.Max}}
	if w.client.TrickleSeconds > 0 {
		r.busy = w.trickleCPUSec / w.client.TrickleSeconds
	}
	switch c := w.client; {
	case c.Received < c.Sent || c.ClosedByTheGateway > 0:
		why = fmt.Sprintf("%d of %d messages lost, %d tunnels closed by the gateway", c.Sent-c.Received, c.Sent, c.ClosedByTheGateway)
	case float64(c.Sent) < 0.95*float64(rate)*c.TrickleSeconds:
		why = fmt.Sprintf("the client sent %d messages in %.1fs, under 95%% of %d/s (the load side fell behind)", c.Sent, c.TrickleSeconds, rate)
	default:
		own := ownCPUs(gwCPUs, loadCPUs)
		if others := othersShare(taskShare(w.sys0, w.sys1, own), r.busy, own); others >= 0.05 {
			why = fmt.Sprintf("other processes ran %.0f%% of the time on CPU %s", 100*others, cpuListString(own))
		}
	}
	return r, why
}

// measureWS runs S6 against one gateway (see the top of the file).
func (b *bench) measureWS(ctx context.Context, gw string, procs int, sc *perfScenario, p *harness.Proc, base string) (wsResult, error) {
	res := wsResult{gateway: gw, procs: procs}
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	spec, err := json.Marshal(lgSpec{WS: &wsSpec{Addr: strings.TrimPrefix(base, "http://"), Host: sc.host, Path: sc.hit,
		Conns: b.wsConns, Rate: b.wsRate, Duration: b.duration}})
	if err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond) // the previous scenario's connections wind down
	u0, err := harness.GroupUsage(p.Pid())
	if err != nil {
		return res, p.Failure(err.Error())
	}
	res.rss0 = u0.RSSKB

	ctx, cancel := context.WithTimeout(ctx, b.duration+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", "-c", b.LoadCPUs, self)
	cmd.Env = append(os.Environ(), "TOLLGATE_BENCH_LOADGEN=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	logPath := filepath.Join(b.Dir, fmt.Sprintf("ws-%s-%d.log", gw, procs))
	logf, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	if _, err := stdin.Write(append(spec, '\n')); err != nil {
		return res, err
	}
	dec := json.NewDecoder(stdout)
	var op wsOpened
	if err := dec.Decode(&op); err != nil {
		return res, fmt.Errorf("S6 %s: websocket client: %v (see %s)", gw, err, logPath)
	}
	if op.Opened < b.wsConns {
		return res, fmt.Errorf("S6 %s: opened %d of %d tunnels: %s", gw, op.Opened, b.wsConns, op.Error)
	}
	time.Sleep(time.Second) // let the gateway's memory settle (GC, buffers released after the upgrade)
	u1, err := harness.GroupUsage(p.Pid())
	if err != nil {
		return res, p.Failure(err.Error())
	}
	res.rss1 = u1.RSSKB
	res.usPerUpgrade = u1.CPUSince(u0, b.tick) * 1e6 / float64(op.Opened)
	if b.wsSettle > 0 {
		time.Sleep(b.wsSettle)
		us, err := harness.GroupUsage(p.Pid())
		if err != nil {
			return res, p.Failure(err.Error())
		}
		res.settleCPUSec = us.CPUSince(u1, b.tick)
		u1 = us
	}
	res.rssSettled = u1.RSSKB
	res.sys0 = readCPUTimes()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return res, err
	}
	if err := dec.Decode(&res.client); err != nil {
		return res, fmt.Errorf("S6 %s: websocket client: %v (see %s)", gw, err, logPath)
	}
	res.sys1 = readCPUTimes()
	u2, err := harness.GroupUsage(p.Pid())
	if err != nil {
		return res, p.Failure(err.Error())
	}
	res.rss2 = u2.RSSKB
	res.trickleCPUSec = u2.CPUSince(u1, b.tick)
	if res.client.Received > 0 {
		res.usPerMsg = res.trickleCPUSec * 1e6 / float64(res.client.Received)
	}
	if res.client.Received == 0 {
		return res, fmt.Errorf("S6 %s: no message came back through the gateway (see %s)", gw, logPath)
	}
	return res, nil
}
