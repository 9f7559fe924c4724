package h2door

import (
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// Pooled goroutines for the chain.
//
// Go's HTTP/2 server runs each stream's handler on a goroutine of its own, started for
// the stream, and a goroutine starts on a small stack. The chain (routing, auth, limits,
// the proxy's round trip, fasthttp's parsers) needs several times that, so every stream
// grew its stack two or three times, each growth a copy of the whole stack: a seventh of
// the edge's CPU over HTTP/2 in a profile under h2load. fasthttp avoids it on HTTP/1.1 by
// serving connections on goroutines it keeps (its worker pool); workers does the same for
// streams. The stream's goroutine hands the stream to an idle worker, whose stack has
// already grown, and waits for it: two goroutine switches in place of the growths.
//
// A worker idle for maxIdle stops, so a burst's workers do not stay. A panic in the
// chain is carried back to the stream's goroutine and raised there, where Go's server
// recovers it for that stream as it would have.

const maxIdle = 10 * time.Second

type workers struct {
	h        *handler // whose streams the workers serve
	maxIdle  time.Duration
	mu       sync.Mutex
	idle     []*worker // the most recently used last
	sweeping bool      // a sweeper goroutine runs; one does while a worker is idle
}

type worker struct {
	tasks    chan job
	lastUsed time.Time
}

// job is what a worker runs: a stream of Go's server (task) or of the door's own
// (stream). ran is called once the worker is idle again, so that whoever waits for the
// job finds the worker free for the next.
type job interface {
	run()
	ran()
}

type task struct {
	h       *handler
	w       http.ResponseWriter
	r       *http.Request
	aborted bool
	panic   any
	done    chan struct{}
}

var tasks = sync.Pool{New: func() any { return &task{done: make(chan struct{}, 1)} }}

// run serves the stream on a worker and returns when it is done.
func (p *workers) run(w http.ResponseWriter, r *http.Request) (aborted bool) {
	t := tasks.Get().(*task)
	t.w, t.r, t.h = w, r, p.h
	p.get() <- t
	<-t.done
	aborted, pv := t.aborted, t.panic
	*t = task{done: t.done}
	tasks.Put(t)
	if pv != nil {
		panic(pv)
	}
	return aborted
}

func (t *task) run() { t.aborted, t.panic = t.h.serveRecovering(t.w, t.r) }
func (t *task) ran() { t.done <- struct{}{} }

// start runs j on a worker and returns at once.
func (p *workers) start(j job) { p.get() <- j }

// get returns the tasks of an idle worker, starting one when none is.
func (p *workers) get() chan<- job {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		wk := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return wk.tasks
	}
	p.mu.Unlock()
	wk := &worker{tasks: make(chan job, 1)}
	go p.work(wk)
	return wk.tasks
}

func (p *workers) work(wk *worker) {
	for j := range wk.tasks {
		j.run()
		wk.lastUsed = time.Now()
		p.mu.Lock()
		p.idle = append(p.idle, wk)
		sweep := !p.sweeping
		p.sweeping = true
		p.mu.Unlock()
		j.ran()
		if sweep {
			go p.sweep()
		}
	}
}

// sweep stops the workers idle for p.maxIdle, every p.maxIdle, until none is left idle.
func (p *workers) sweep() {
	for {
		time.Sleep(p.maxIdle)
		cut := time.Now().Add(-p.maxIdle)
		p.mu.Lock()
		n := 0
		for n < len(p.idle) && p.idle[n].lastUsed.Before(cut) {
			close(p.idle[n].tasks)
			n++
		}
		p.idle = append(p.idle[:0], p.idle[n:]...)
		if len(p.idle) == 0 {
			p.sweeping = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// serveRecovering is serve, with a panic returned rather than raised: on a worker, no one
// would recover it. The chain's stack is logged here, since the stream's goroutine that
// raises it again has another.
func (h *handler) serveRecovering(w http.ResponseWriter, r *http.Request) (aborted bool, pv any) {
	defer func() {
		if v := recover(); v != nil {
			pv = v
			if v != http.ErrAbortHandler && h.log != nil {
				h.log.Printf("h2door: panic serving a stream: %v\n%s", v, debug.Stack())
			}
		}
	}()
	return h.serve(w, r), nil
}
