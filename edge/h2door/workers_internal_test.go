package h2door

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

type testChain struct{}

func (testChain) Serve(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/panic" {
		panic("the chain failed")
	}
	ctx.SetBodyString("ok " + string(ctx.Path()))
}

func (testChain) Refuse(ctx *fasthttp.RequestCtx, r Refusal) { ctx.SetStatusCode(400) }

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Streams run on pooled workers: one after another they reuse one, a panic in the chain
// resets its stream only (the connection serves the next), and idle workers stop.
func TestWorkers(t *testing.T) {
	h := NewHandler(Config{HeaderBytes: 4096, FastLogger: discardLogger{}}, testChain{}).(*handler)
	h.workers.maxIdle = 100 * time.Millisecond
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.ConnContext = WithConn
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic's stack
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).TLSClientConfig.NextProtos = []string{"h2"}

	get := func(path string) (string, error) {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: %s", path, resp.Proto)
		}
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for i := range 20 {
		if body, err := get("/a"); err != nil || body != "ok /a" {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
	}
	h.workers.mu.Lock()
	idle := len(h.workers.idle)
	h.workers.mu.Unlock()
	if idle != 1 {
		t.Errorf("%d idle workers after sequential streams, want 1", idle)
	}

	if _, err := get("/panic"); err == nil || !strings.Contains(err.Error(), "INTERNAL_ERROR") {
		t.Errorf("a panicking chain: %v, want the stream reset", err)
	}
	if body, err := get("/b"); err != nil || body != "ok /b" {
		t.Fatalf("after the panic: %q, %v", body, err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		h.workers.mu.Lock()
		idle, sweeping := len(h.workers.idle), h.workers.sweeping
		h.workers.mu.Unlock()
		if idle == 0 && !sweeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still idle after %v", idle, 10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A stream after the sweep starts a worker again.
	if body, err := get("/c"); err != nil || body != "ok /c" {
		t.Fatalf("after the sweep: %q, %v", body, err)
	}
}
