package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"tollgate/infra/usage"
	"tollgate/tenants"
)

// bytesTally counts what the client sent and got as the meter should: every answer of a
// known tenant is a request, billable when the upstream answered; bytes are the bodies,
// the request's only when the upstream answered (the edge refuses before reading it).
type bytesTally struct {
	mu sync.Mutex
	c  usage.Counts
}

func (bt *bytesTally) add(r *edgeResp, sent int) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if r.Status != 200 {
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(r.Body, &env)
		if env.Error.Code == tenants.ETenantNotFound || env.Error.Code == tenants.ENotReady {
			return
		}
		sent = 0
	} else {
		bt.c.Billable++
	}
	bt.c.Requests++
	bt.c.BytesIn += int64(sent)
	bt.c.BytesOut += int64(len(r.Body))
}

func (bt *bytesTally) counts() usage.Counts {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.c
}

// TestBillingBytes: the bytes that went through a real edge process reach the usage API
// exactly: a request body and a chunked 3 MiB response, error envelopes, and a WebSocket
// tunnel still open when the edge is SIGTERMed (its bytes are recorded as the drain
// closes it, before the meter's last flush).
func TestBillingBytes(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "bill-bytes")
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		body := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		w.Header().Set("Content-Type", "application/octet-stream")
		for len(body) > 0 { // no Content-Length: chunked, in odd pieces
			k := min(12_345, len(body))
			w.Write(body[:k])
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	}))
	t.Cleanup(big.Close)
	b.api.createRoute(b.slug, routeSpec("big", "/big", big.URL, "key"))
	b.api.createRoute(b.slug, routeSpec("ws", "/ws", wsEchoUpstream(t), "key", "websocket", true))
	b.startBilling()
	edge, e := b.startMeteredEdge("edge-bytes", t.TempDir())

	var tally bytesTally
	do := func(method, path string, body []byte, header ...string) (*edgeResp, error) {
		req, err := http.NewRequest(method, "http://"+e.addr+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Host = b.slug + ".localhost:" + portOf(e.addr)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		rb, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		r := &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: rb}
		tally.add(r, len(body))
		return r, nil
	}
	eventually(t, 10*time.Second, "routes served", func() error {
		r, err := do("GET", "/big/x?n=10", nil, "X-API-Key", b.key)
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})

	up := bytes.Repeat([]byte("u"), 100_000)
	if r, err := do("POST", "/big/x?n="+strconv.Itoa(3<<20), up, "X-API-Key", b.key); err != nil || r.Status != 200 || len(r.Body) != 3<<20 {
		t.Fatalf("POST: %v %v", r, err)
	}
	if r, err := do("POST", "/big/x?n=10", up); err != nil || r.Status != 401 {
		t.Fatalf("POST without a key: %v %v", r, err) // an envelope out, nothing read in
	}

	c, br, st, err := wsOpen(e.addr, b.slug+".localhost:"+portOf(e.addr), "/ws", "X-API-Key", b.key)
	if err != nil || st != 101 {
		t.Fatalf("upgrade: %d %v", st, err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("w"), 50_000) // as raw bytes: the edge relays, the upstream echoes
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(br, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	tally.mu.Lock()
	tally.c.Requests++
	tally.c.Billable++ // the upgrade: the upstream answered 101
	tally.c.BytesIn += int64(len(msg))
	tally.c.BytesOut += int64(len(msg))
	tally.mu.Unlock()

	edge.stopClean(t, stopTimeout) // the tunnel is still open

	want := tally.counts()
	var got usage.Counts
	check := func() error {
		if got, err = b.usage(); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("usage %+v, want %+v", got, want)
		}
		return nil
	}
	eventually(t, usageDeadline, "usage bytes", check)
	time.Sleep(2500 * time.Millisecond)
	if err := check(); err != nil {
		t.Fatalf("usage changed after it matched: %v", err)
	}
	t.Logf("usage %+v", got)
}
