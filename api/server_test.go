package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tollgate/api"
)

// The body limit is enforced by fasthttp as it reads the request (app.Test reports that as
// an error), so these tests go over TCP. The oversize request announces its length and
// sends no body: the server must refuse on the header alone, and a client still writing
// a body it will not read could see a reset instead of the answer.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.BodyLimit = 1024 })
	e.tenant("acme")
	addr := e.serve()
	res, body := announce(t, addr, "/v1/tenants/acme/consumers", 1025, "big-one")
	if res.StatusCode != 413 || res.Header.Get("X-Request-Id") != "big-one" || res.Header.Get("Content-Type") != "application/json" ||
		!strings.Contains(body, `"code":"body_too_large"`) || !strings.Contains(body, `"request_id":"big-one"`) || !strings.Contains(body, "1024") {
		t.Fatalf("oversize body: %d %v %s", res.StatusCode, res.Header, body)
	}
	// Up to the limit is fine.
	ok := `{"name":"` + strings.Repeat("x", 90) + `"}`
	ok += strings.Repeat(" ", 1024-len(ok))
	if status, _, body := post(t, "http://"+addr+"/v1/tenants/acme/consumers", ok); status != 201 {
		t.Fatalf("body of exactly the limit: %d %s", status, body)
	}
	if n := e.count("/v1/tenants/acme/consumers"); n != 1 {
		t.Fatalf("%d consumers, want 1", n)
	}
}

func TestDefaultBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	addr := e.serve()
	if res, body := announce(t, addr, "/v1/tenants/acme/consumers", api.DefaultBodyLimit+1, ""); res.StatusCode != 413 || !strings.Contains(body, "body_too_large") {
		t.Fatalf("oversize body: %d %s", res.StatusCode, body)
	}
	// A body of nearly 1 MB is read, decoded and judged.
	fits := `{"name":"x","plan":"` + strings.Repeat("x", api.DefaultBodyLimit-100) + `"}`
	if status, _, body := post(t, "http://"+addr+"/v1/tenants/acme/consumers", fits); status != 400 || !strings.Contains(body, `"field":"plan"`) {
		t.Fatalf("1 MB body: %d %.300s", status, body)
	}
}

// A function upload may be past BodyLimit, up to its own limit, announced on the header.
func TestFunctionUploadBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.BodyLimit = 1024 })
	e.tenant("acme")
	addr := e.serve()
	if res, body := announce(t, addr, "/v1/tenants/acme/consumers", 2048, ""); res.StatusCode != 413 {
		t.Fatalf("a consumer of 2 KiB: %d %s", res.StatusCode, body)
	}
	res, body := announceMethod(t, "PUT", addr, "/v1/tenants/acme/functions/f", 17<<20, "")
	if res.StatusCode != 413 || !strings.Contains(body, "body_too_large") {
		t.Fatalf("a module over 16 MiB: %d %s", res.StatusCode, body)
	}
	// 2 KiB that is not Wasm is read and judged, not refused for its size.
	req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/tenants/acme/functions/f", strings.NewReader(strings.Repeat("x", 2048)))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/wasm")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 400 || !strings.Contains(string(b), `"field":"module"`) {
		t.Fatalf("2 KiB of text as a module: %d %s", r.StatusCode, b)
	}
}

// announce sends the headers of a POST with Content-Length n, and no body.
func announce(t *testing.T, addr, path string, n int, requestID string) (*http.Response, string) {
	t.Helper()
	return announceMethod(t, "POST", addr, path, n, requestID)
}

// announceMethod is announce with another method.
func announceMethod(t *testing.T, method, addr, path string, n int, requestID string) (*http.Response, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, adminToken, n)
	if requestID != "" {
		req += "X-Request-Id: " + requestID + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// serve runs the server on a free port until the test ends and returns its base URL.
func (e *env) serve() string {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	go e.srv.Serve(ln)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// noKeepAlive leaves no idle connection for Shutdown to wait out.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// post sends body as the admin over real HTTP.
func post(t *testing.T, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sane := "abc-DEF_123-" + strings.Repeat("x", 52) // 64 characters
	for _, c := range []struct {
		name, in string
		echo     bool
	}{
		{"sane", "req-42_A", true},
		{"64 chars", sane, true},
		{"65 chars", sane + "x", false},
		{"space", "a b", false},
		{"newline-ish", "a%0Ab", false},
		{"quote", `a"b`, false},
		{"missing", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// On success, on an error and on an unknown path alike.
			for _, path := range []string{"/healthz", "/v1/tenants/nosuch", "/nope"} {
				r := e.do("GET", path, adminToken, nil, "X-Request-Id", c.in)
				got := r.header.Get("X-Request-Id")
				if c.echo && got != c.in {
					t.Fatalf("%s: X-Request-Id %q, want %q", path, got, c.in)
				}
				if !c.echo && (got == c.in || len(got) < 16) {
					t.Fatalf("%s: X-Request-Id %q for input %q, want a generated one", path, got, c.in)
				}
				if r.status >= 400 {
					r.wantErr(r.status, "not_found", "") // checks request_id == header
				}
			}
		})
	}
	a := e.do("GET", "/healthz", "", nil).header.Get("X-Request-Id")
	b := e.do("GET", "/healthz", "", nil).header.Get("X-Request-Id")
	if a == b {
		t.Fatalf("two requests got the same generated id %q", a)
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.do("GET", "/v2/tenants", adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", "/", "", nil).wantErr(404, "not_found", "")
	// Paths are case-sensitive.
	e.do("GET", "/V1/TENANTS", adminToken, nil).wantErr(404, "not_found", "")
	// Unknown paths do not need credentials to be unknown.
	e.do("POST", "/v1/nothing", "", `{}`).wantErr(404, "not_found", "")

	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/tenants", "POST, GET, HEAD"},
		{"PUT", "/v1/tenants/acme", "GET, HEAD, PATCH, DELETE"},
		{"POST", "/v1/tenants/acme/routes/00000000-0000-0000-0000-000000000000", "GET, HEAD, PUT, DELETE"},
		{"PATCH", "/healthz", "GET, HEAD"},
		{"PROPFIND", "/v1/tenants", "POST, GET, HEAD"},
	} {
		r := e.do(c.method, c.path, adminToken, nil).wantErr(405, "method_not_allowed", "")
		if r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, r.header.Get("Allow"), c.allow)
		}
	}
	// A method Fiber does not know, on a path that does not exist.
	e.do("PROPFIND", "/nope", "", nil).wantErr(404, "not_found", "")
	// HEAD of a GET endpoint works.
	e.do("HEAD", "/v1/tenants/acme", adminToken, nil).want(200)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	var fail error
	e := newEnv(t, func(c *api.Config) {
		ready := c.Ready
		c.Ready = func(ctx context.Context) error {
			if fail != nil {
				return fail
			}
			return ready(ctx)
		}
	})
	if r := e.do("GET", "/healthz", "", nil).want(200); r.str("status") != "ok" {
		t.Fatalf("healthz: %s", r.body)
	}
	if r := e.do("GET", "/readyz", "", nil).want(200); r.str("status") != "ready" {
		t.Fatalf("readyz: %s", r.body)
	}
	// Probes ignore query strings and credentials.
	e.do("GET", "/healthz?probe=1", "garbage", nil).want(200)
	fail = errors.New("postgres: connection refused (secret detail)")
	r := e.do("GET", "/readyz", "", nil).wantErr(503, "not_ready", "")
	if strings.Contains(string(r.body), "secret detail") {
		t.Fatalf("readyz leaks the error: %s", r.body)
	}
	if !strings.Contains(e.log.String(), "secret detail") {
		t.Fatalf("readyz failure not logged")
	}
	e.do("GET", "/healthz", "", nil).want(200)
}

func TestInternalError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.db.Close() // the store now fails every call with a non-domain error
	r := e.do("GET", "/v1/tenants/acme", adminToken, nil, "X-Request-Id", "trace-me").wantErr(500, "internal", "")
	if r.message() != "internal error" {
		t.Fatalf("500 message %q", r.message())
	}
	logs := e.log.String()
	if !strings.Contains(logs, "request_id=trace-me") || !strings.Contains(logs, "closed") {
		t.Fatalf("internal error not logged with its request id and detail:\n%s", logs)
	}
	e.do("GET", "/readyz", "", nil).wantErr(503, "not_ready", "")
}

func TestServeAndShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	req, _ := http.NewRequest("POST", url+"/v1/tenants", strings.NewReader(`{"slug":"live"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var tn struct{ Slug string }
	if res.StatusCode != 201 || json.Unmarshal(body, &tn) != nil || tn.Slug != "live" {
		t.Fatalf("create over TCP: %d %s", res.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
	if _, err := noKeepAlive.Get(url + "/healthz"); err == nil {
		t.Fatal("still serving after Shutdown")
	}
	// Draining: readiness fails from the moment Shutdown is called.
	e.do("GET", "/readyz", "", nil).wantErr(503, "not_ready", "")
}

// TestIdleConnectionGetsNoAnswer: a connection that sends nothing, or half a request, for
// longer than ReadTimeout is closed without a byte written: an unrequested 408 would be
// read by a pooling client as the answer to the next request it sends.
func TestIdleConnectionGetsNoAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.ReadTimeout = 300 * time.Millisecond })
	addr := e.serve()
	for name, sent := range map[string]string{"nothing": "", "half a request": "GET /v1/tenants HTTP/1.1\r\nHost: x\r\n"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, sent); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(conn)
		conn.Close()
		if len(got) != 0 || err != nil {
			t.Errorf("%s sent: the server wrote %q (err %v), want the connection closed silently", name, got, err)
		}
	}
	// The server still answers a connection that sends its request in time.
	res, err := noKeepAlive.Get("http://" + addr + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("a request in time: %d", res.StatusCode)
	}
}

// A config document may be past BodyLimit, up to ConfigBodyLimit, announced on the
// header; other bodies keep BodyLimit.
func TestConfigBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.BodyLimit, c.ConfigBodyLimit = 1024, 64<<10 })
	e.tenant("acme")
	addr := e.serve()
	if res, body := announce(t, addr, "/v1/tenants/acme/consumers", 2048, ""); res.StatusCode != 413 {
		t.Fatalf("a consumer of 2 KiB: %d %s", res.StatusCode, body)
	}
	res, body := announceMethod(t, "PUT", addr, "/v1/tenants/acme/config", 65<<10, "")
	if res.StatusCode != 413 || !strings.Contains(body, "body_too_large") || !strings.Contains(body, "65536") {
		t.Fatalf("a document over 64 KiB: %d %s", res.StatusCode, body)
	}
	// A document of 8 KiB is read and applied.
	var routes []string
	for i := 0; len(strings.Join(routes, ",")) < 8<<10; i++ {
		routes = append(routes, fmt.Sprintf(`{"name":"r%03d","paths":["/r%03d"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}`, i, i))
	}
	doc := `{"version":1,"tenant":"acme","routes":[` + strings.Join(routes, ",") + `]}`
	req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/tenants/acme/config", strings.NewReader(doc))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(b), `"applied":true`) {
		t.Fatalf("a document of 8 KiB: %d %.300s", r.StatusCode, b)
	}
}
