package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"tollgate/infra/admin"
	"tollgate/tenants"
)

func TestReadyz(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	srv := admin.Serve(ln, admin.NewRegistry(), nil, func(context.Context) error {
		if down.Load() {
			return errors.New(`postgres: "unreachable"`)
		}
		return nil
	})
	defer srv.Shutdown(context.Background())
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d", code)
	}
	down.Store(true)
	code, body := get("/readyz")
	var env struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || code != 503 || env.Error.Code != string(tenants.ENotReady) || env.Error.Message != `postgres: "unreachable"` {
		t.Fatalf("/readyz with postgres down: %d %s (%v)", code, body, err)
	}
	down.Store(false)
	srv.Drain()
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz while draining: %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz while draining: %d", code)
	}
}
