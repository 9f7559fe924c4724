package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/api"
	"tollgate/edge/function/functiontest"
	"tollgate/infra/functionstore"
	"tollgate/infra/testenv"
	"tollgate/tenants"
)

// machineJetStream connects to the machine's NATS server (TOLLGATE_TEST_NATS_URL).
func machineJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	url := os.Getenv("TOLLGATE_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 500*time.Millisecond); err != nil {
		t.Fatalf("no NATS server at %s (start it: bash .ci/services): %v", url, err)
	} else {
		c.Close()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// functionEnv is an api with the object store and the log stream of its own prefix.
func functionEnv(t *testing.T) (*env, *functionstore.Store, jetstream.JetStream, string) {
	t.Helper()
	js := machineJetStream(t)
	prefix := testenv.Name("tgtest_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := functionstore.Open(ctx, js, functionstore.BucketName(prefix), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		js.DeleteObjectStore(context.Background(), functionstore.BucketName(prefix))
		js.DeleteStream(context.Background(), functionstore.LogStream(prefix))
	})
	e := newEnv(t, func(c *api.Config) {
		c.Modules = store
		c.FunctionLogs = functionstore.NewLogReader(js, prefix, 1)
		c.Audit = c.Tenants.(tenants.AuditService)
	})
	return e, store, js, prefix
}

// withSection appends a custom section: another module, as valid as the first.
func withSection(m []byte, name string) []byte {
	out := append([]byte{}, m...)
	out = append(out, 0, byte(len(name)+2), byte(len(name)))
	return append(append(out, name...), 'x')
}

func TestFunctionsAPI(t *testing.T) {
	t.Parallel()
	e, store, js, prefix := functionEnv(t)
	ctx := context.Background()
	acme := e.tenant("acme")
	e.tenant("other")
	v1 := functiontest.Build(t, "watnoop")
	v2 := withSection(v1, "v")
	base := "/v1/tenants/acme/functions/"

	// Refusals, each with the envelope.
	e.do("PUT", base+"sign", adminToken, v1, "Content-Type", "application/json").wantErr(415, "unsupported_media_type", "")
	e.do("PUT", base+"sign", adminToken, []byte("hello, not wasm"), "Content-Type", "application/wasm").wantErr(400, "validation_failed", "module")
	r := e.do("PUT", base+"sign", adminToken, []byte("\x00asm\x01\x00\x00\x00"), "Content-Type", "application/wasm").wantErr(400, "validation_failed", "module")
	if !strings.Contains(r.message(), "proxy_") {
		t.Errorf("a module without the ABI's exports: %q does not say what is missing", r.message())
	}
	e.do("PUT", base+"Sign%20Me", adminToken, v1, "Content-Type", "application/wasm").wantErr(400, "validation_failed", "name")
	e.do("PUT", base+"sign", adminToken, []byte{}, "Content-Type", "application/wasm").wantErr(400, "validation_failed", "module")

	r = e.do("PUT", base+"sign", adminToken, v1, "Content-Type", "application/wasm").want(200)
	sha1 := functionstore.Digest(v1)
	if r.str("sha256") != sha1 || r.json["size"] != float64(len(v1)) || r.json["version"] != float64(1) || r.str("name") != "sign" {
		t.Fatalf("upload: %s", r.body)
	}
	// In the object store before any route can name it.
	if got, err := store.Get(ctx, sha1); err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("object store: %v", err)
	}
	if n := e.auditCount(acme, "functions.update"); n != 1 {
		t.Fatalf("%d audit entries functions.update", n)
	}
	// Who may write routes may upload; a viewer reads.
	viewer := e.roleToken("acme", tenants.RoleViewer).token
	e.do("PUT", base+"sign", viewer, v1, "Content-Type", "application/wasm").wantErr(403, "forbidden", "")
	e.do("DELETE", base+"sign", viewer, nil).wantErr(403, "forbidden", "")
	e.do("GET", base+"sign", viewer, nil).want(200)
	dev := e.roleToken("acme", tenants.RoleDeveloper).token
	e.do("PUT", base+"sign", dev, v1, "Content-Type", "application/wasm").want(200)

	// A route naming it gets the current version's digest.
	rb := routeBody("signed", "/signed")
	rb["functions"] = []any{map[string]any{"name": "sign", "config": "{\"secret\":\"s\"}"}}
	r = e.do("POST", "/v1/tenants/acme/routes", adminToken, rb).want(201)
	routeID := r.str("id")
	fns := r.json["functions"].([]any)
	if f := fns[0].(map[string]any); f["sha256"] != sha1 || f["config"] != "{\"secret\":\"s\"}" {
		t.Fatalf("route's functions: %v", fns)
	}
	rb["name"], rb["paths"] = "unknown", []string{"/unknown"}
	rb["functions"] = []any{map[string]any{"name": "nope"}}
	e.do("POST", "/v1/tenants/acme/routes", adminToken, rb).wantErr(400, "validation_failed", "functions[0].name")
	rb["auth"], rb["functions"] = "function", []any{}
	e.do("POST", "/v1/tenants/acme/routes", adminToken, rb).wantErr(400, "validation_failed", "functions")

	r = e.do("PUT", base+"sign", adminToken, v2, "Content-Type", "application/wasm").want(200)
	sha2 := functionstore.Digest(v2)
	if r.str("sha256") != sha2 || r.json["version"] != float64(2) {
		t.Fatalf("second version: %s", r.body)
	}
	if rs := r.json["routes"].([]any); len(rs) != 1 || rs[0] != routeID {
		t.Fatalf("routes: %v", rs)
	}

	list := e.do("GET", "/v1/tenants/acme/functions", adminToken, nil).want(200).items()
	if len(list) != 1 || list[0].(map[string]any)["sha256"] != sha2 {
		t.Fatalf("list: %v", list)
	}
	r = e.do("GET", base+"sign?versions=true", adminToken, nil).want(200)
	vs := r.json["versions"].([]any)
	if len(vs) != 2 || vs[0].(map[string]any)["sha256"] != sha2 || vs[1].(map[string]any)["routes"].([]any)[0] != routeID {
		t.Fatalf("versions: %s", r.body)
	}
	if vs := e.do("GET", base+"sign/versions", adminToken, nil).want(200).items(); len(vs) != 2 {
		t.Fatalf("versions list: %v", vs)
	}
	e.do("GET", base+"sign?versions=maybe", adminToken, nil).wantErr(400, "validation_failed", "versions")
	if m := e.do("GET", base+"sign/module", adminToken, nil).want(200); !bytes.Equal(m.body, v2) || m.header.Get("Content-Type") != "application/wasm" {
		t.Fatalf("module download: %d bytes, %s", len(m.body), m.header.Get("Content-Type"))
	}
	if m := e.do("GET", base+"sign/module?sha256="+sha1, adminToken, nil).want(200); !bytes.Equal(m.body, v1) {
		t.Fatal("module download of v1")
	}
	e.do("GET", base+"sign/module?sha256=abc", adminToken, nil).wantErr(400, "validation_failed", "sha256")

	// Another tenant's token sees nothing of it.
	other := e.token("other")
	e.do("GET", base+"sign", other, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/other/functions/sign", other, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/other/functions/sign/module", other, nil).wantErr(404, "not_found", "")

	// Logs: the tenant's lines of the function, or of all.
	for i, fn := range []string{"sign", "other", "sign"} {
		b, _ := json.Marshal(tenants.FunctionLog{TenantID: acme, RouteID: routeID, Function: fn, Level: "info", Message: "m" + string(rune('0'+i)), RequestID: "a1b2c3"})
		if _, err := functionstore.EnsureLogStream(ctx, js, prefix, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, functionstore.LogSubject(prefix, acme), b); err != nil {
			t.Fatal(err)
		}
	}
	if lines := e.do("GET", base+"sign/logs?limit=10", adminToken, nil).want(200).items(); len(lines) != 2 || lines[1].(map[string]any)["message"] != "m2" {
		t.Fatalf("logs: %v", lines)
	}
	if lines := e.do("GET", "/v1/tenants/acme/functions:logs", adminToken, nil).want(200).items(); len(lines) != 3 {
		t.Fatalf("all logs: %v", lines)
	}
	e.do("GET", base+"sign/logs?limit=0", adminToken, nil).wantErr(400, "validation_failed", "limit")
	if lines := e.do("GET", "/v1/tenants/other/functions:logs", other, nil).want(200).items(); len(lines) != 0 {
		t.Fatalf("another tenant's logs: %v", lines)
	}

	// Delete: refused while a route runs it; then the object store's sweep forgets the
	// modules.
	r = e.do("DELETE", base+"sign", adminToken, nil).wantErr(409, "conflict", "name")
	if !strings.Contains(r.message(), routeID) {
		t.Fatalf("conflict message %q does not name the route", r.message())
	}
	e.do("DELETE", "/v1/tenants/acme/routes/"+routeID, adminToken, nil).want(204)
	e.do("DELETE", base+"sign", adminToken, nil).want(204)
	e.do("GET", base+"sign", adminToken, nil).wantErr(404, "not_found", "")
	e.do("DELETE", base+"sign", adminToken, nil).wantErr(404, "not_found", "")
	if _, err := store.Sweep(ctx, e.db, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, sha1); err == nil {
		t.Fatal("a module no tenant keeps is still in the object store after a sweep")
	}
}

// The reconciler puts back what the object store lost.
func TestFunctionReconcile(t *testing.T) {
	t.Parallel()
	e, store, _, _ := functionEnv(t)
	ctx := context.Background()
	e.tenant("acme")
	m := functiontest.Build(t, "watnoop")
	e.do("PUT", "/v1/tenants/acme/functions/f", adminToken, m, "Content-Type", "application/wasm").want(200)
	sha := functionstore.Digest(m)
	if err := store.Delete(ctx, sha); err != nil {
		t.Fatal(err)
	}
	n, err := store.Reconcile(ctx, e.db)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v", n, err)
	}
	if _, err := store.Get(ctx, sha); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Reconcile(ctx, e.db); err != nil || n != 0 {
		t.Fatalf("second Reconcile = %d, %v", n, err)
	}
}
