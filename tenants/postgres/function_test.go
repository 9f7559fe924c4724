package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"testing"

	"tollgate/tenants"
)

func wasm(body string) []byte { return append([]byte("\x00asm\x01\x00\x00\x00"), body...) }

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The life of a function: versions, routes that pin one, rollback, the delete refused
// while a route runs it, and the modules no tenant keeps any more.
func TestFunctions(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	other := mustTenant(t, db, "other")

	v1, v2 := wasm("one"), wasm("two")
	f, err := db.PutFunction(ctx, tn.ID, "sign", v1, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "sign" || f.Version != 1 || f.SHA256 != hexSum(v1) || f.Size != int64(len(v1)) || f.CreatedBy != "ann@example.com" || len(f.Routes) != 0 {
		t.Fatalf("first upload: %+v", f)
	}
	// The same module again adds no version.
	if again, err := db.PutFunction(ctx, tn.ID, "sign", v1, "bob"); err != nil || again.Version != 1 {
		t.Fatalf("same module again: %+v, %v", again, err)
	}

	// A route naming the function without a digest pins the current version.
	r := newRoute(tn.ID, "api", "/api")
	r.Functions = []tenants.FunctionRef{{Name: "sign", Config: `{"k":1}`}}
	mustRoute(t, db, r)
	if r.Functions[0].SHA256 != hexSum(v1) || r.Functions[0].Config != `{"k":1}` {
		t.Fatalf("route's function: %+v", r.Functions[0])
	}

	f, err = db.PutFunction(ctx, tn.ID, "sign", v2, "ann@example.com")
	if err != nil || f.Version != 2 || f.SHA256 != hexSum(v2) || !slices.Equal(f.Routes, []string{r.ID}) {
		t.Fatalf("second version: %+v, %v", f, err)
	}
	got, err := db.FindRoute(ctx, tn.ID, r.ID)
	if err != nil || got.Functions[0].SHA256 != hexSum(v1) {
		t.Fatalf("a new version moved the route: %+v, %v", got.Functions, err)
	}

	// Saving the route again without a digest takes the new version; naming v1 rolls back.
	got.Functions[0].SHA256 = ""
	if err := db.UpdateRoute(ctx, got); err != nil || got.Functions[0].SHA256 != hexSum(v2) {
		t.Fatalf("update to current: %+v, %v", got.Functions, err)
	}
	got.Functions[0].SHA256 = hexSum(v1)
	if err := db.UpdateRoute(ctx, got); err != nil || got.Functions[0].SHA256 != hexSum(v1) {
		t.Fatalf("rollback: %+v, %v", got.Functions, err)
	}

	// Unknown names and digests, and another tenant's function, are refused.
	bad := newRoute(tn.ID, "bad", "/bad")
	bad.Functions = []tenants.FunctionRef{{Name: "nope"}}
	err = db.CreateRoute(ctx, bad)
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "functions[0].name" {
		t.Fatalf("field %q", e.Field)
	}
	bad.Functions = []tenants.FunctionRef{{Name: "sign", SHA256: hexSum([]byte("never"))}}
	err = db.CreateRoute(ctx, bad)
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "functions[0].sha256" {
		t.Fatalf("field %q", e.Field)
	}
	theirs := newRoute(other.ID, "theirs", "/t")
	theirs.Functions = []tenants.FunctionRef{{Name: "sign"}}
	wantCode(t, db.CreateRoute(ctx, theirs), tenants.EValidation)

	f, err = db.FindFunction(ctx, tn.ID, "sign", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Versions) != 2 || f.Versions[0].Version != 2 || f.Versions[1].SHA256 != hexSum(v1) ||
		!slices.Equal(f.Versions[1].Routes, []string{r.ID}) || len(f.Versions[0].Routes) != 0 {
		t.Fatalf("versions: %+v", f.Versions)
	}
	if m, err := db.FunctionModule(ctx, tn.ID, "sign", ""); err != nil || string(m) != string(v2) {
		t.Fatalf("current module: %q, %v", m, err)
	}
	if m, err := db.FunctionModule(ctx, tn.ID, "sign", hexSum(v1)); err != nil || string(m) != string(v1) {
		t.Fatalf("v1 module: %q, %v", m, err)
	}
	_, err = db.FunctionModule(ctx, other.ID, "sign", "")
	wantCode(t, err, tenants.ENotFound)
	if _, err := db.FindFunction(ctx, other.ID, "sign", false); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("another tenant sees the function: %v", err)
	}

	// The other tenant uploads the same bytes: one digest, two owners.
	if _, err := db.PutFunction(ctx, other.ID, "copy", v1, "eve"); err != nil {
		t.Fatal(err)
	}
	digests, err := db.FunctionDigests(ctx, "", 100)
	if err != nil || len(digests) != 2 {
		t.Fatalf("digests %v, %v", digests, err)
	}

	err = db.DeleteFunction(ctx, tn.ID, "sign")
	wantCode(t, err, tenants.EConflict)
	if !strings.Contains(tenants.ErrorMessage(err), r.ID) {
		t.Fatalf("conflict does not name the route: %v", err)
	}
	if err := db.DeleteRoute(ctx, tn.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteFunction(ctx, tn.ID, "sign"); err != nil {
		t.Fatal(err)
	}
	// v1 is still the other tenant's.
	if unused, err := db.UnusedModules(ctx, []string{hexSum(v1), hexSum(v2)}); err != nil || !slices.Equal(unused, []string{hexSum(v2)}) {
		t.Fatalf("unused modules %v, %v, want only v2's digest", unused, err)
	}
	if m, err := db.ModuleByDigest(ctx, hexSum(v1)); err != nil || string(m) != string(v1) {
		t.Fatalf("ModuleByDigest: %q, %v", m, err)
	}
	_, err = db.FindFunction(ctx, tn.ID, "sign", false)
	wantCode(t, err, tenants.ENotFound)
	if list, err := db.ListFunctions(ctx, tn.ID); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %v, %v", list, err)
	}
	if list, err := db.ListFunctions(ctx, other.ID); err != nil || len(list) != 1 || list[0].Name != "copy" {
		t.Fatalf("other's list: %v, %v", list, err)
	}
}

// The plan's limits: function names and module size, with the message of each.
func TestFunctionLimits(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := &tenants.Tenant{Slug: "free", PlatformPlan: tenants.PlatformFree}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if tn.Limits.Resources.Functions != 3 || tn.Limits.Resources.FunctionBytes != 1<<20 || tn.Limits.Resources.FunctionTimeoutMS != 5 {
		t.Fatalf("free plan's function limits: %+v", tn.Limits.Resources)
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := db.PutFunction(ctx, tn.ID, name, wasm(name), ""); err != nil {
			t.Fatal(err)
		}
	}
	_, err := db.PutFunction(ctx, tn.ID, "d", wasm("d"), "")
	wantCode(t, err, tenants.EValidation)
	wantMessage(t, err, "the free plan allows 3 functions; delete one or move to a larger plan")
	// A new version of a kept name is not one more function.
	if _, err := db.PutFunction(ctx, tn.ID, "a", wasm("a2"), ""); err != nil {
		t.Fatal(err)
	}
	_, err = db.PutFunction(ctx, tn.ID, "a", make([]byte, 1<<20+1), "")
	wantCode(t, err, tenants.EValidation)
	if !strings.HasPrefix(tenants.ErrorMessage(err), "the free plan allows modules of at most 1048576 bytes") {
		t.Fatalf("message %q", tenants.ErrorMessage(err))
	}
	_, err = db.PutFunction(ctx, tn.ID, "Bad Name", wasm("x"), "")
	wantCode(t, err, tenants.EValidation)
}

// Concurrent uploads of new names at the limit: exactly the limit's worth pass.
func TestFunctionLimitRace(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := &tenants.Tenant{Slug: "free", PlatformPlan: tenants.PlatformFree}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + i))
			if _, err := db.PutFunction(ctx, tn.ID, name, wasm(name), ""); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if tenants.ErrorCode(err) != tenants.EValidation {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 3 {
		t.Fatalf("%d uploads passed a limit of 3", ok)
	}
}

// Config as code names functions by name and sha256: export shows the current version,
// apply makes another uploaded version current (and routes follow when they name none),
// dry runs show it, and a digest never uploaded is refused.
func TestFunctionsConfig(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	v1, v2 := wasm("one"), wasm("two")
	for _, m := range [][]byte{v1, v2} {
		if _, err := db.PutFunction(ctx, tn.ID, "sign", m, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.PutFunction(ctx, tn.ID, "spare", v1, ""); err != nil {
		t.Fatal(err)
	}
	r := newRoute(tn.ID, "api", "/api")
	r.Functions = []tenants.FunctionRef{{Name: "sign"}}
	mustRoute(t, db, r)

	doc := parseDoc(t, exportJSON(t, db, tn.ID))
	if len(doc.Functions) != 2 || doc.Functions[0] != (tenants.ConfigFunction{Name: "sign", SHA256: hexSum(v2)}) {
		t.Fatalf("exported functions: %+v", doc.Functions)
	}
	if doc.Routes[0].Functions[0].SHA256 != hexSum(v2) {
		t.Fatalf("exported route: %+v", doc.Routes[0].Functions)
	}
	// Exported as is, nothing changes.
	if p := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{}); p.Changes() != 0 {
		t.Fatalf("a fresh export applies changes: %+v", p)
	}

	// Roll sign back to v1; the route names sign without a digest and follows.
	doc.Functions[0].SHA256 = hexSum(v1)
	doc.Routes[0].Functions[0].SHA256 = ""
	p := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{DryRun: true})
	if changes(p.Updated) != "function:sign route:api" || p.Applied {
		t.Fatalf("dry run: %+v", p)
	}
	if f, _ := db.FindFunction(ctx, tn.ID, "sign", false); f.SHA256 != hexSum(v2) {
		t.Fatal("a dry run changed the function")
	}
	doc.Revision = ""
	p = apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{})
	if !p.Applied {
		t.Fatalf("apply: %+v", p)
	}
	if f, _ := db.FindFunction(ctx, tn.ID, "sign", false); f.SHA256 != hexSum(v1) || f.Version != 1 {
		t.Fatalf("after apply: %+v", f)
	}
	if got, _ := db.FindRoute(ctx, tn.ID, r.ID); got.Functions[0].SHA256 != hexSum(v1) {
		t.Fatalf("route after apply: %+v", got.Functions)
	}

	// Refusals: a digest never uploaded under the name, a name never uploaded.
	bad := parseDoc(t, exportJSON(t, db, tn.ID))
	bad.Revision = ""
	bad.Functions[0].SHA256 = hexSum([]byte("never"))
	_, err := db.ApplyConfig(ctx, tn.ID, bad, tenants.ApplyOptions{})
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "functions[0].sha256" {
		t.Fatalf("field %q: %v", e.Field, err)
	}
	bad = parseDoc(t, exportJSON(t, db, tn.ID))
	bad.Functions = append(bad.Functions, tenants.ConfigFunction{Name: "ghost", SHA256: hexSum(v1)})
	_, err = db.ApplyConfig(ctx, tn.ID, bad, tenants.ApplyOptions{})
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "functions[2].name" {
		t.Fatalf("field %q: %v", e.Field, err)
	}

	// Prune deletes the function the document leaves out.
	doc = parseDoc(t, exportJSON(t, db, tn.ID))
	doc.Functions = doc.Functions[:1]
	p = apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{Prune: true})
	if changes(p.Deleted) != "function:spare" {
		t.Fatalf("prune: %+v", p)
	}
	if _, err := db.FindFunction(ctx, tn.ID, "spare", false); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("spare after prune: %v", err)
	}
}
