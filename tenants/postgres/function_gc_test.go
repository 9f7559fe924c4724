package postgres_test

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/functionstore"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// moduleStore opens a bucket of its own on the machine's NATS server
// (TOLLGATE_TEST_NATS_URL overrides it), deleted when the test ends.
func moduleStore(t *testing.T) *functionstore.Store {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket := functionstore.BucketName(testenv.Name("tgtest_"))
	s, err := functionstore.Open(ctx, js, bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteObjectStore(ctx, bucket); err != nil {
			t.Logf("delete bucket %s: %v", bucket, err)
		}
	})
	return s
}

// upload is the api's upload: the object store, Postgres, the object store again.
func upload(t *testing.T, db *postgres.DB, s *functionstore.Store, tenantID, name string, module []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Put(ctx, module); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutFunction(ctx, tenantID, name, module, "test"); err != nil {
		t.Fatalf("put function %s: %v", name, err)
	}
	if _, err := s.Put(ctx, module); err != nil {
		t.Fatal(err)
	}
}

// stored lists which of modules the store holds, by name.
func stored(t *testing.T, s *functionstore.Store, modules map[string][]byte) []string {
	t.Helper()
	var names []string
	for name, m := range modules {
		ok, err := s.Has(context.Background(), hexSum(m))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// The sweep deletes the modules no tenant names any more, however they stopped being
// named (the delete endpoint's DeleteFunction, config as code's prune, the tenant's
// deletion, an upload that never committed), and keeps those a function version or a
// route of any tenant names, and those put within the grace period.
func TestFunctionModuleSweep(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	s := moduleStore(t)
	ctx := context.Background()
	acme, beta, gone := mustTenant(t, db, "acme"), mustTenant(t, db, "beta"), mustTenant(t, db, "gone")

	m := map[string][]byte{
		"kept":    wasm("kept"),    // acme's, a route runs it
		"deleted": wasm("deleted"), // acme's, deleted
		"pruned":  wasm("pruned"),  // acme's, pruned by config as code
		"old":     wasm("old"),     // acme's first version of "kept": a version still names it
		"shared":  wasm("shared"),  // acme's and beta's; acme deletes its function
		"tenant":  wasm("tenant"),  // the deleted tenant's
		"stray":   wasm("stray"),   // put, never committed (the plan refused the upload, say)
		"routed":  wasm("routed"),  // no version names it, a route's spec does
	}
	upload(t, db, s, acme.ID, "kept", m["old"])
	upload(t, db, s, acme.ID, "kept", m["kept"])
	r := newRoute(acme.ID, "api", "/api")
	r.Functions = []tenants.FunctionRef{{Name: "kept"}}
	mustRoute(t, db, r)
	upload(t, db, s, acme.ID, "deleted", m["deleted"])
	upload(t, db, s, acme.ID, "pruned", m["pruned"])
	upload(t, db, s, acme.ID, "shared", m["shared"])
	upload(t, db, s, beta.ID, "shared", m["shared"])
	upload(t, db, s, gone.ID, "fn", m["tenant"])
	upload(t, db, s, acme.ID, "routed", m["routed"])
	if _, err := s.Put(ctx, m["stray"]); err != nil {
		t.Fatal(err)
	}
	// A route that names a module no version has cannot be saved; the sweep checks routes
	// all the same, and this one is made so by hand.
	rr := newRoute(beta.ID, "raw", "/raw")
	mustRoute(t, db, rr)
	if _, err := rawConn(t, url).Exec(ctx, `UPDATE routes SET spec = jsonb_set(spec, '{functions}', $2::jsonb) WHERE id = $1`,
		rr.ID, `[{"name": "ghost", "sha256": "`+hexSum(m["routed"])+`"}]`); err != nil {
		t.Fatal(err)
	}

	if err := db.DeleteFunction(ctx, acme.ID, "deleted"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteFunction(ctx, acme.ID, "shared"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteFunction(ctx, acme.ID, "routed"); err != nil {
		t.Fatal(err)
	}
	doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: acme.Slug,
		Functions: []tenants.ConfigFunction{{Name: "kept", SHA256: hexSum(m["kept"])}}}
	if plan, err := db.ApplyConfig(ctx, acme.ID, doc, tenants.ApplyOptions{Prune: true}); err != nil {
		t.Fatal(err)
	} else if len(plan.Deleted) != 1 || plan.Deleted[0].Name != "pruned" {
		t.Fatalf("prune deleted %+v, want function pruned", plan.Deleted)
	}
	if err := db.DeleteTenant(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}

	all := []string{"deleted", "kept", "old", "pruned", "routed", "shared", "stray", "tenant"}
	if got := stored(t, s, m); !slices.Equal(got, all) {
		t.Fatalf("before any sweep the store holds %v", got)
	}
	// Everything was put just now: within an hour's grace nothing goes.
	if deleted, err := s.Sweep(ctx, db, time.Hour); err != nil || len(deleted) != 0 {
		t.Fatalf("sweep within the grace deleted %v, %v", deleted, err)
	}
	deleted, err := s.Sweep(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{hexSum(m["deleted"]), hexSum(m["pruned"]), hexSum(m["stray"]), hexSum(m["tenant"])}
	slices.Sort(want)
	slices.Sort(deleted)
	if !slices.Equal(deleted, want) {
		t.Fatalf("sweep deleted %v, want %v", deleted, want)
	}
	if got := stored(t, s, m); !slices.Equal(got, []string{"kept", "old", "routed", "shared"}) {
		t.Fatalf("after the sweep the store holds %v", got)
	}
	if deleted, err := s.Sweep(ctx, db, 0); err != nil || len(deleted) != 0 {
		t.Fatalf("a second sweep deleted %v, %v", deleted, err)
	}

	// Once the route is gone too, its module goes.
	if err := db.DeleteRoute(ctx, beta.ID, rr.ID); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.Sweep(ctx, db, 0); err != nil || !slices.Equal(deleted, []string{hexSum(m["routed"])}) {
		t.Fatalf("sweep after the route's deletion deleted %v, %v", deleted, err)
	}
}

// An upload of bytes that were uploaded long ago and dropped since finds the old object
// in the store; a sweep that deletes it meanwhile holds the upload's commit until it has,
// and the upload's second put stores it again. A sweep that comes after the commit keeps
// the module.
func TestFunctionModuleSweepRacesUpload(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	s := moduleStore(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	module := wasm("again")
	sha := hexSum(module)
	upload(t, db, s, tn.ID, "fn", module)
	if err := db.DeleteFunction(ctx, tn.ID, "fn"); err != nil {
		t.Fatal(err)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	type result struct {
		dropped bool
		err     error
	}
	swept := make(chan result, 1)
	go func() {
		dropped, err := db.DropModule(ctx, sha, func(ctx context.Context) error {
			close(entered)
			<-release
			return s.Delete(ctx, sha)
		})
		swept <- result{dropped, err}
	}()
	<-entered

	// The upload: the store still has the object, so its first put writes nothing.
	if _, err := s.Put(ctx, module); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		_, err := db.PutFunction(ctx, tn.ID, "fn", module, "test")
		committed <- err
	}()
	select {
	case err := <-committed:
		t.Fatalf("the upload committed while the sweep held the module: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if res := <-swept; res.err != nil || !res.dropped {
		t.Fatalf("DropModule = %v, %v", res.dropped, res.err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Has(ctx, sha); err != nil || ok {
		t.Fatalf("after the sweep, before the second put: Has = %v, %v", ok, err)
	}
	if _, err := s.Put(ctx, module); err != nil {
		t.Fatal(err)
	}

	// Now a version names it: the sweep leaves it.
	if dropped, err := db.DropModule(ctx, sha, func(context.Context) error {
		t.Error("drop called for a module a version names")
		return nil
	}); err != nil || dropped {
		t.Fatalf("DropModule of a named module = %v, %v", dropped, err)
	}
	if deleted, err := s.Sweep(ctx, db, 0); err != nil || len(deleted) != 0 {
		t.Fatalf("sweep deleted %v, %v", deleted, err)
	}
	if b, err := s.Get(ctx, sha); err != nil || string(b) != string(module) {
		t.Fatalf("Get = %q, %v", b, err)
	}
}
