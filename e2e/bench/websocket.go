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
// memory return, edge/memory: two collections, which scan every tunnel's two
// goroutine stacks, then the pages handed back) is not a cost of the messages that
// happen to follow it.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/wsload"
)

// startSelf runs this binary again as one of the bench's own upstreams, on a free port
// pinned to the load CPUs: env names the variable that tells the child what to serve and
// where (it gets the address), log the file its output goes to.
func (b *bench) startSelf(name, log, env string) (addr string, port int, p *harness.Proc, err error) {
	if port, err = harness.FreePort(); err != nil {
		return "", 0, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	p, err = harness.StartProc(name, filepath.Join(b.Dir, log), b.LoadCPUs, append(os.Environ(), env+"="+addr), self)
	if err != nil {
		return "", 0, nil, err
	}
	b.Clean.Add(p.Stop)
	return addr, port, p, nil
}

// startWSEcho starts the echo upstream on a free port, pinned to the load CPUs.
func (b *bench) startWSEcho(ctx context.Context) error {
	addr, port, p, err := b.startSelf("websocket echo upstream", "wsecho.log", "TOLLGATE_BENCH_WSECHO")
	if err != nil {
		return err
	}
	if err := b.WaitHTTP(ctx, "websocket echo upstream", "http://"+addr+"/", 10*time.Second, p); err != nil {
		return err
	}
	b.WSPort = port
	return nil
}

// wsResult is S6 on one gateway.
type wsResult struct {
	gateway       string
	procs         int
	round         int
	client        wsload.Result
	rss0, rss1    int64 // KB: before the tunnels, with them open (after the trickle: rss2)
	rss2          int64
	rssSettled    int64 // KB: with them open, after -ws-settle
	usPerUpgrade  float64
	usPerMsg      float64
	trickleCPUSec float64
	settleCPUSec  float64       // CPU during -ws-settle, the tunnels open and idle
	sys0, sys1    cpustat.Times // every CPU's busy and total ticks around the trickle (/proc/stat)
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
		if others := othersShare(cpustat.TaskShare(w.sys0, w.sys1, own), r.busy, own); others >= 0.05 {
			why = fmt.Sprintf("other processes ran %.0f%% of the time on CPU %s", 100*others, cpustat.FormatList(own))
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
	spec, err := json.Marshal(lgSpec{WS: &wsload.Spec{Addr: strings.TrimPrefix(base, "http://"), Host: sc.host, Path: sc.hit,
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
	var op wsload.Opened
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
	res.sys0 = cpustat.Read()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return res, err
	}
	if err := dec.Decode(&res.client); err != nil {
		return res, fmt.Errorf("S6 %s: websocket client: %v (see %s)", gw, err, logPath)
	}
	res.sys1 = cpustat.Read()
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
