// Package probe asks a server for one path, again and again, over a keep-alive connection
// of its own and from an OS thread pinned to given CPUs: hotupdate polls the edge every
// 250 µs for the answer of a changed route, and the polls must neither queue behind the
// load generator's requests nor take the edge's CPUs.
package probe

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"tollgate/e2e/bench/cpustat"
)

// Probe asks for one path over a keep-alive connection of its own, from an OS thread
// pinned to its CPUs. One Get at a time: the thread serves them in turn.
type Probe struct {
	reqs chan struct{}
	outs chan answer
	req  []byte
}

// answer is one Get's outcome, handed back from the pinned thread.
type answer struct {
	body string
	code int
	err  error
}

// New starts a Probe of GET path on virtual host host at addr (host:port), its thread
// pinned to cpus (taskset's list syntax). It dials on the first Get, and again after a
// connection that cannot carry the next request.
func New(addr, host, path, cpus string) (*Probe, error) {
	mask, err := cpustat.Mask(cpus)
	if err != nil {
		return nil, err
	}
	p := &Probe{reqs: make(chan struct{}), outs: make(chan answer),
		req: []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: tollgate-bench\r\n\r\n")}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread exits with the goroutine
		if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask))); errno != 0 {
			ready <- fmt.Errorf("sched_setaffinity %s: %v", cpus, errno)
			return
		}
		ready <- nil
		var (
			conn net.Conn
			br   *bufio.Reader
		)
		for range p.reqs {
			if conn == nil {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					p.outs <- answer{err: err}
					continue
				}
				conn, br = c, bufio.NewReaderSize(c, 4096)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			o, keep := p.roundTrip(conn, br)
			if !keep {
				conn.Close()
				conn = nil
			}
			p.outs <- o
		}
		if conn != nil {
			conn.Close()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return p, nil
}

// roundTrip sends one request on conn and reads its answer; keep is false when the
// connection cannot carry the next one.
func (p *Probe) roundTrip(conn net.Conn, br *bufio.Reader) (o answer, keep bool) {
	if _, err := conn.Write(p.req); err != nil {
		return answer{err: err}, false
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return answer{err: err}, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return answer{err: err}, false
	}
	return answer{body: string(body), code: resp.StatusCode}, !resp.Close
}

// Get sends the request and returns the answer's body (its first 4 KiB), status code,
// or why there is none.
func (p *Probe) Get() (string, int, error) {
	p.reqs <- struct{}{}
	o := <-p.outs
	return o.body, o.code, o.err
}

// Close ends the thread and its connection; the Probe takes no Get after it.
func (p *Probe) Close() { close(p.reqs) }

// Change makes a change with put (a route's new body sent to the api, which returns once
// the api answered 200) and then polls until the answer is 200 with body want, every
// interval, for at most timeout. api is put's duration, edge the time from its return to
// that answer; failed counts the polls meanwhile that were not answered 200. On a timeout,
// the error gives the last answer.
func (p *Probe) Change(put func() error, want string, interval, timeout time.Duration) (api, edge time.Duration, failed int, err error) {
	t0 := time.Now()
	if err := put(); err != nil {
		return 0, 0, 0, err
	}
	t200 := time.Now()
	deadline := t200.Add(timeout)
	for {
		body, code, err := p.Get()
		if err != nil || code != http.StatusOK {
			failed++
		}
		if err == nil && code == http.StatusOK && body == want {
			return t200.Sub(t0), time.Since(t200), failed, nil
		}
		if time.Now().After(deadline) {
			last := fmt.Sprintf("%d %.200q", code, body)
			if err != nil {
				last = err.Error()
			}
			return 0, 0, failed, fmt.Errorf("no answer %q within %s of the api's 200 (the last answer: %s)", want, timeout, last)
		}
		time.Sleep(interval)
	}
}
