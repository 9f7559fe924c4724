package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"tollgate/infra/testenv"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

func TestMigrateCreatesDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, _ := url.Parse(testenv.AdminDatabaseURL())
	name := testenv.Name("tg_test_migrate_")
	u.Path = "/" + name
	t.Cleanup(func() {
		admin, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
		if err != nil {
			t.Log(err)
			return
		}
		defer admin.Close(ctx)
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	// Twice: the second run finds the database and nothing to apply.
	for i := 0; i < 2; i++ {
		if err := postgres.Migrate(ctx, u.String()); err != nil {
			t.Fatalf("migrate %d: %v", i, err)
		}
	}
	db, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := db.ListTenants(ctx, tenants.Page{}); err != nil {
		t.Fatal(err)
	}
}

func TestTenantCRUD(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)

	tn := &tenants.Tenant{Slug: "acme", Name: "Acme Inc"}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(tn.ID); err != nil || tn.Version != 1 || tn.PlatformPlan != "free" || tn.CreatedAt.IsZero() {
		t.Fatalf("created tenant %+v", tn)
	}
	got, err := db.FindTenant(ctx, "acme")
	if err != nil || got.ID != tn.ID || got.Name != "Acme Inc" {
		t.Fatalf("find: %+v %v", got, err)
	}
	if got, err := db.FindTenantByID(ctx, tn.ID); err != nil || got.Slug != "acme" {
		t.Fatalf("find by id: %+v %v", got, err)
	}
	_, err = db.FindTenant(ctx, "nope")
	wantCode(t, err, tenants.ENotFound)

	err = db.CreateTenant(ctx, &tenants.Tenant{Slug: "acme"})
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `slug "acme" is taken`)
	wantCode(t, db.CreateTenant(ctx, &tenants.Tenant{Slug: "Bad Slug"}), tenants.EValidation)

	upd := &tenants.Tenant{ID: tn.ID, Name: "Acme Corp", PlatformPlan: "pro", Version: 1}
	if err := db.UpdateTenant(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if upd.Version != 2 || upd.Slug != "acme" || upd.PlatformPlan != "pro" || upd.UpdatedAt.Before(upd.CreatedAt) {
		t.Fatalf("updated %+v", upd)
	}
	stale := &tenants.Tenant{ID: tn.ID, Name: "Stale", Version: 1}
	wantCode(t, db.UpdateTenant(ctx, stale), tenants.EVersionConflict)
	wantCode(t, db.UpdateTenant(ctx, &tenants.Tenant{ID: uuid.NewString(), Name: "x", Version: 1}), tenants.ENotFound)
	wantCode(t, db.UpdateTenant(ctx, &tenants.Tenant{ID: "not-a-uuid", Name: "x", Version: 1}), tenants.ENotFound)

	rows := outboxAfter(t, conn, 0)
	if len(rows) != 2 {
		t.Fatalf("outbox: %v", rows)
	}
	for i, want := range []string{"Acme Inc", "Acme Corp"} {
		e := decode(t, rows[i])
		if rows[i].Key != tenants.TenantKey(tn.ID) || e.Tenant.Name != want || e.Tenant.Version != int64(i+1) {
			t.Fatalf("outbox row %d: %v", i, rows[i])
		}
	}

	if err := db.DeleteTenant(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindTenant(ctx, "acme")
	wantCode(t, err, tenants.ENotFound)
	wantCode(t, db.DeleteTenant(ctx, tn.ID), tenants.ENotFound)
	// The slug is free again.
	mustTenant(t, db, "acme")
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, mustTenant(t, db, fmt.Sprintf("t%d", i)).ID)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		list, next, err := db.ListTenants(ctx, tenants.Page{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range list {
			got = append(got, tn.ID)
		}
		if next == "" {
			if pages != 2 {
				t.Fatalf("%d pages", pages+1)
			}
			break
		}
		cursor = next
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("listed %v, created %v (ids must sort in creation order)", got, ids)
	}
	// An exact multiple of the limit ends with an empty cursor, not an empty page.
	list, next, err := db.ListTenants(ctx, tenants.Page{Limit: 7})
	if err != nil || len(list) != 7 || next != "" {
		t.Fatalf("limit 7: %d items, next %q, %v", len(list), next, err)
	}
	list, _, err = db.ListTenants(ctx, tenants.Page{})
	if err != nil || len(list) != 7 {
		t.Fatalf("default limit: %d, %v", len(list), err)
	}
	_, _, err = db.ListTenants(ctx, tenants.Page{Cursor: "garbage"})
	wantCode(t, err, tenants.EInvalidRequest)
}

func TestRouteCRUD(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	before := maxOutboxID(t, conn)

	r := newRoute(tn.ID, "hello", "/hello", "=/exact")
	r.Methods = []string{"get", "POST"}
	r.RateLimit = &tenants.RateLimit{RPS: 10}
	r.Upstream.Targets[0].URL = "http://LOCALHOST:9999/"
	mustRoute(t, db, r)
	if r.Version != 1 || r.ID == "" || r.Auth != tenants.AuthNone || r.RateLimit.Burst != 10 ||
		!slices.Equal(r.Methods, []string{"GET", "POST"}) || r.Upstream.Targets[0].Weight != 1 ||
		r.Upstream.Targets[0].URL != "http://localhost:9999" || r.TimeoutMS != tenants.DefaultTimeoutMS {
		t.Fatalf("created route not normalized: %s", mustJSON(r))
	}
	got, err := db.FindRoute(ctx, tn.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if mustJSON(got) != mustJSON(r) {
		t.Fatalf("found\n%s\ncreated\n%s", mustJSON(got), mustJSON(r))
	}

	// Update: change paths and methods; the old path is free afterwards.
	upd := *got
	upd.Paths = []string{"/hi"}
	upd.Methods = nil
	upd.StripPrefix = true
	if err := db.UpdateRoute(ctx, &upd); err != nil {
		t.Fatal(err)
	}
	if upd.Version != 2 || !upd.StripPrefix || len(upd.Methods) != 0 {
		t.Fatalf("updated %s", mustJSON(upd))
	}
	mustRoute(t, db, newRoute(tn.ID, "takes-old-path", "/hello"))
	stale := *got
	wantCode(t, db.UpdateRoute(ctx, &stale), tenants.EVersionConflict)

	list, next, err := db.ListRoutes(ctx, tn.ID, tenants.Page{})
	if err != nil || len(list) != 2 || next != "" || list[0].ID != r.ID {
		t.Fatalf("list: %v %q %v", list, next, err)
	}

	rows := outboxAfter(t, conn, before)
	if len(rows) != 3 {
		t.Fatalf("outbox: %v", rows)
	}
	e := decode(t, rows[1])
	if rows[1].Key != tenants.ObjectKey(tn.ID, tenants.KindRoute, r.ID) || e.Route.Version != 2 || e.Route.Paths[0] != "/hi" {
		t.Fatalf("update's outbox row: %v", rows[1])
	}

	if err := db.DeleteRoute(ctx, tn.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindRoute(ctx, tn.ID, r.ID)
	wantCode(t, err, tenants.ENotFound)
	wantCode(t, db.DeleteRoute(ctx, tn.ID, r.ID), tenants.ENotFound)
	wantCode(t, db.UpdateRoute(ctx, &upd), tenants.ENotFound)
	last := outboxAfter(t, conn, before)
	if del := last[len(last)-1]; del.Key != tenants.ObjectKey(tn.ID, tenants.KindRoute, r.ID) || del.Value != nil {
		t.Fatalf("delete's outbox row: %v", del)
	}
	// The deleted route's path is free.
	mustRoute(t, db, newRoute(tn.ID, "hi-again", "/hi"))
}

func TestRouteConflicts(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	other := mustTenant(t, db, "other")

	get := newRoute(tn.ID, "get-hello", "/a", "/hello")
	get.Methods = []string{"GET"}
	mustRoute(t, db, get)
	any := mustRoute(t, db, newRoute(tn.ID, "any-star", "/star"))
	before := maxOutboxID(t, conn)

	cases := []struct {
		name    string
		route   func() *tenants.Route
		code    string
		message string
	}{
		{"same name", func() *tenants.Route { return newRoute(tn.ID, "get-hello", "/elsewhere") },
			tenants.EConflict, `a route named "get-hello" already exists`},
		{"same path and method", func() *tenants.Route {
			r := newRoute(tn.ID, "dup", "/x", "/hello")
			r.Methods = []string{"POST", "GET"}
			return r
		}, tenants.EConflict, `path /hello (GET) is already served by route "get-hello"`},
		{"all methods twice", func() *tenants.Route { return newRoute(tn.ID, "dup", "/star") },
			tenants.EConflict, `path /star (all methods) is already served by route "any-star"`},
		{"invalid", func() *tenants.Route { return newRoute(tn.ID, "bad", "no-slash") }, tenants.EValidation, ""},
		{"private upstream", func() *tenants.Route {
			r := newRoute(tn.ID, "private", "/p")
			r.Upstream.Targets[0].URL = "http://10.0.0.1"
			return r
		}, tenants.EValidation, ""},
		{"unknown tenant", func() *tenants.Route { return newRoute(uuid.NewString(), "r", "/r") }, tenants.ENotFound, ""},
	}
	for _, c := range cases {
		err := db.CreateRoute(ctx, c.route())
		wantCode(t, err, c.code)
		if c.message != "" {
			wantMessage(t, err, c.message)
		}
	}
	// Nothing above wrote anything.
	if rows := outboxAfter(t, conn, before); len(rows) != 0 {
		t.Fatalf("failed creates wrote outbox rows: %v", rows)
	}

	// Another method on the same path, the exact form of the path, and the same path in
	// another tenant are all distinct claims.
	post := newRoute(tn.ID, "post-hello", "/hello")
	post.Methods = []string{"POST"}
	mustRoute(t, db, post)
	mustRoute(t, db, newRoute(tn.ID, "exact-hello", "=/hello"))
	mustRoute(t, db, newRoute(other.ID, "get-hello", "/hello"))

	// Updates hit the same constraints, and a failed update changes nothing.
	upd := *any
	upd.Name = "get-hello"
	err := db.UpdateRoute(ctx, &upd)
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `a route named "get-hello" already exists`)
	upd = *any
	upd.Paths = []string{"/star", "/a"}
	upd.Methods = []string{"GET"}
	err = db.UpdateRoute(ctx, &upd)
	wantMessage(t, err, `path /a (GET) is already served by route "get-hello"`)
	got, _ := db.FindRoute(ctx, tn.ID, any.ID)
	if got.Version != 1 || !slices.Equal(got.Paths, []string{"/star"}) {
		t.Fatalf("failed update changed the route: %s", mustJSON(got))
	}
	// The route still holds /star for all methods.
	wantCode(t, db.CreateRoute(ctx, newRoute(tn.ID, "again", "/star")), tenants.EConflict)
}

// Two writers racing for one path: exactly one wins, the other gets EConflict.
func TestRoutePathRace(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	tn := mustTenant(t, db, "acme")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.CreateRoute(context.Background(), newRoute(tn.ID, fmt.Sprintf("r%d", i), "/contested"))
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			wantCode(t, err, tenants.EConflict)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates succeeded: %v", ok, errs)
	}
}

// Concurrent updates of one version: exactly one wins.
func TestVersionConflictRace(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	tn := mustTenant(t, db, "acme")
	r := mustRoute(t, db, newRoute(tn.ID, "r", "/r"))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := newRoute(tn.ID, "r", "/r") // a copy sharing no slices with r
			u.ID, u.Version, u.TimeoutMS = r.ID, r.Version, 1000+i
			errs[i] = db.UpdateRoute(context.Background(), u)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			wantCode(t, err, tenants.EVersionConflict)
		}
	}
	got, _ := db.FindRoute(context.Background(), tn.ID, r.ID)
	if ok != 1 || got.Version != 2 {
		t.Fatalf("%d updates succeeded, version %d: %v", ok, got.Version, errs)
	}
}

func TestPlans(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")

	p := &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold", RateLimit: &tenants.RateLimit{RPS: 100}, Quota: &tenants.Quota{Requests: 1e6}, Concurrency: 5}
	if err := db.CreatePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := db.FindPlan(ctx, tn.ID, p.ID)
	if err != nil || mustJSON(got) != mustJSON(p) || got.RateLimit.Burst != 100 {
		t.Fatalf("find: %s %v", mustJSON(got), err)
	}
	err = db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"})
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `a plan named "gold" already exists`)
	wantCode(t, db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "Gold!"}), tenants.EValidation)

	upd := *got
	upd.Quota = nil
	upd.Name = "platinum"
	if err := db.UpdatePlan(ctx, &upd); err != nil {
		t.Fatal(err)
	}
	if upd.Version != 2 || upd.Quota != nil {
		t.Fatalf("updated %s", mustJSON(upd))
	}
	wantCode(t, db.UpdatePlan(ctx, got), tenants.EVersionConflict)
	list, _, err := db.ListPlans(ctx, tn.ID, tenants.Page{})
	if err != nil || len(list) != 1 || list[0].Name != "platinum" {
		t.Fatalf("list: %v %v", list, err)
	}

	// A plan in use can be neither deleted nor renamed.
	c := &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "platinum"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	before := maxOutboxID(t, conn)
	err = db.DeletePlan(ctx, tn.ID, p.ID)
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `plan "platinum" is assigned to 1 consumer(s), e.g. "alice"; move them to another plan first`)
	ren := upd
	ren.Name = "diamond"
	wantCode(t, db.UpdatePlan(ctx, &ren), tenants.EConflict)
	// Changing its limits is fine.
	lim := upd
	lim.Concurrency = 9
	if err := db.UpdatePlan(ctx, &lim); err != nil {
		t.Fatal(err)
	}
	c.Plan = ""
	if err := db.UpdateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := db.DeletePlan(ctx, tn.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.DeletePlan(ctx, tn.ID, p.ID), tenants.ENotFound)
	rows := outboxAfter(t, conn, before)
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.Key
	}
	want := []string{
		tenants.ObjectKey(tn.ID, tenants.KindPlan, p.ID),
		tenants.ObjectKey(tn.ID, tenants.KindConsumer, c.ID),
		tenants.ObjectKey(tn.ID, tenants.KindPlan, p.ID),
	}
	if !slices.Equal(keys, want) || rows[2].Value != nil {
		t.Fatalf("outbox: %v", rows)
	}
}

func TestConsumersAndKeys(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")

	err := db.CreateConsumer(ctx, &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "gold"})
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "plan" {
		t.Fatalf("field %q", e.Field)
	}
	if err := db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"}); err != nil {
		t.Fatal(err)
	}
	c := &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "gold"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	err = db.CreateConsumer(ctx, &tenants.Consumer{TenantID: tn.ID, Name: "alice"})
	wantCode(t, err, tenants.EConflict)
	wantMessage(t, err, `a consumer named "alice" already exists`)
	bob := &tenants.Consumer{TenantID: tn.ID, Name: "bob"}
	if err := db.CreateConsumer(ctx, bob); err != nil {
		t.Fatal(err)
	}
	if got, err := db.FindConsumer(ctx, tn.ID, bob.ID); err != nil || got.Plan != "" || mustJSON(got) != mustJSON(bob) {
		t.Fatalf("find: %s %v", mustJSON(got), err)
	}
	upd := *bob
	upd.Name = "alice"
	wantCode(t, db.UpdateConsumer(ctx, &upd), tenants.EConflict)
	upd = *bob
	upd.Plan = "silver"
	wantCode(t, db.UpdateConsumer(ctx, &upd), tenants.EValidation)
	upd.Plan = "gold"
	if err := db.UpdateConsumer(ctx, &upd); err != nil || upd.Version != 2 {
		t.Fatalf("update: %v %d", err, upd.Version)
	}
	wantCode(t, db.UpdateConsumer(ctx, bob), tenants.EVersionConflict)
	list, _, err := db.ListConsumers(ctx, tn.ID, tenants.Page{Limit: 1})
	if err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("list: %v %v", list, err)
	}

	// Keys.
	var keys []*tenants.Key
	for i := 0; i < 3; i++ {
		_, hash, prefix := tenants.NewSecret(tenants.KeyPrefix)
		k := &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Hash: hash, Prefix: prefix}
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	err = db.CreateKey(ctx, &tenants.Key{TenantID: tn.ID, ConsumerID: bob.ID, Hash: keys[0].Hash})
	wantCode(t, err, tenants.EConflict)
	wantCode(t, db.CreateKey(ctx, &tenants.Key{TenantID: tn.ID, ConsumerID: uuid.NewString(), Hash: tenants.HashSecret("x")}), tenants.ENotFound)
	wantCode(t, db.CreateKey(ctx, &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Hash: "plaintext!"}), tenants.EValidation)
	got, next, err := db.ListKeys(ctx, tn.ID, c.ID, tenants.Page{Limit: 2})
	if err != nil || len(got) != 2 || next == "" || got[0].Hash != keys[0].Hash {
		t.Fatalf("list keys: %v %q %v", got, next, err)
	}
	got, next, err = db.ListKeys(ctx, tn.ID, c.ID, tenants.Page{Limit: 2, Cursor: next})
	if err != nil || len(got) != 1 || next != "" || got[0].ID != keys[2].ID {
		t.Fatalf("list keys page 2: %v %q %v", got, next, err)
	}
	if got, _, err := db.ListKeys(ctx, tn.ID, bob.ID, tenants.Page{}); err != nil || len(got) != 0 {
		t.Fatalf("bob's keys: %v %v", got, err)
	}
	_, _, err = db.ListKeys(ctx, tn.ID, uuid.NewString(), tenants.Page{})
	wantCode(t, err, tenants.ENotFound)

	if err := db.DeleteKey(ctx, tn.ID, c.ID, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.DeleteKey(ctx, tn.ID, c.ID, keys[0].ID), tenants.ENotFound)
	wantCode(t, db.DeleteKey(ctx, tn.ID, bob.ID, keys[1].ID), tenants.ENotFound) // not bob's key

	// Deleting the consumer deletes its remaining keys' entries too.
	before := maxOutboxID(t, conn)
	if err := db.DeleteConsumer(ctx, tn.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.DeleteConsumer(ctx, tn.ID, c.ID), tenants.ENotFound)
	rows := outboxAfter(t, conn, before)
	var gotKeys []string
	for _, r := range rows {
		if r.Value != nil {
			t.Fatalf("not a delete: %v", r)
		}
		gotKeys = append(gotKeys, r.Key)
	}
	wantKeys := []string{
		tenants.ObjectKey(tn.ID, tenants.KindKey, keys[1].ID),
		tenants.ObjectKey(tn.ID, tenants.KindKey, keys[2].ID),
		tenants.ObjectKey(tn.ID, tenants.KindConsumer, c.ID),
	}
	slices.Sort(gotKeys[:2])
	slices.Sort(wantKeys[:2])
	if !slices.Equal(gotKeys, wantKeys) {
		t.Fatalf("outbox after consumer delete:\n%v\nwant keys %v", rows, wantKeys)
	}
	var n int
	conn.QueryRow(ctx, `SELECT count(*) FROM keys`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestKeyEntry(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	c := &tenants.Consumer{TenantID: tn.ID, Name: "alice"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	before := maxOutboxID(t, conn)
	plain, hash, prefix := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Hash: hash, Prefix: prefix}
	if err := db.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != 1 {
		t.Fatalf("outbox: %v", rows)
	}
	e := decode(t, rows[0])
	if *e.Key != (tenants.KeyEntry{ID: k.ID, TenantID: tn.ID, ConsumerID: c.ID, Hash: tenants.HashSecret(plain)}) {
		t.Fatalf("key entry %+v", e.Key)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	before := maxOutboxID(t, conn)

	plain, hash, prefix := tenants.NewSecret(tenants.TokenPrefix)
	tok := &tenants.Token{TenantID: tn.ID, Name: "ci", Hash: hash, Prefix: prefix}
	if err := db.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if tok.Role != tenants.RoleAdmin || tok.ID == "" {
		t.Fatalf("token %+v", tok)
	}
	got, err := db.FindTokenByHash(ctx, tenants.HashSecret(plain))
	if err != nil || got.ID != tok.ID || got.TenantID != tn.ID {
		t.Fatalf("find: %+v %v", got, err)
	}
	_, err = db.FindTokenByHash(ctx, tenants.HashSecret("wrong"))
	wantCode(t, err, tenants.ENotFound)
	wantCode(t, db.CreateToken(ctx, &tenants.Token{TenantID: tn.ID, Name: "dup", Hash: hash}), tenants.EConflict)
	wantCode(t, db.CreateToken(ctx, &tenants.Token{TenantID: tn.ID, Name: "", Hash: hash}), tenants.EValidation)
	wantCode(t, db.CreateToken(ctx, &tenants.Token{TenantID: uuid.NewString(), Name: "x", Hash: tenants.HashSecret("y")}), tenants.ENotFound)
	list, _, err := db.ListTokens(ctx, tn.ID, tenants.Page{})
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := db.DeleteToken(ctx, tn.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, db.DeleteToken(ctx, tn.ID, tok.ID), tenants.ENotFound)
	if rows := outboxAfter(t, conn, before); len(rows) != 0 {
		t.Fatalf("tokens went through the outbox: %v", rows)
	}
}

// Tenant B sees none of tenant A's objects by id, and can change none of them.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	a := mustTenant(t, db, "a")
	b := mustTenant(t, db, "b")

	route := mustRoute(t, db, newRoute(a.ID, "r", "/r"))
	plan := &tenants.ConsumerPlan{TenantID: a.ID, Name: "gold"}
	if err := db.CreatePlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	cons := &tenants.Consumer{TenantID: a.ID, Name: "alice", Plan: "gold"}
	if err := db.CreateConsumer(ctx, cons); err != nil {
		t.Fatal(err)
	}
	_, hash, _ := tenants.NewSecret(tenants.KeyPrefix)
	key := &tenants.Key{TenantID: a.ID, ConsumerID: cons.ID, Hash: hash}
	if err := db.CreateKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	_, thash, _ := tenants.NewSecret(tenants.TokenPrefix)
	tok := &tenants.Token{TenantID: a.ID, Name: "t", Hash: thash}
	if err := db.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	before := maxOutboxID(t, conn)

	_, err := db.FindRoute(ctx, b.ID, route.ID)
	wantCode(t, err, tenants.ENotFound)
	r2 := *route
	r2.TenantID = b.ID
	wantCode(t, db.UpdateRoute(ctx, &r2), tenants.ENotFound)
	wantCode(t, db.DeleteRoute(ctx, b.ID, route.ID), tenants.ENotFound)

	_, err = db.FindPlan(ctx, b.ID, plan.ID)
	wantCode(t, err, tenants.ENotFound)
	p2 := *plan
	p2.TenantID = b.ID
	wantCode(t, db.UpdatePlan(ctx, &p2), tenants.ENotFound)
	wantCode(t, db.DeletePlan(ctx, b.ID, plan.ID), tenants.ENotFound)

	_, err = db.FindConsumer(ctx, b.ID, cons.ID)
	wantCode(t, err, tenants.ENotFound)
	c2 := *cons
	c2.TenantID = b.ID
	c2.Plan = ""
	wantCode(t, db.UpdateConsumer(ctx, &c2), tenants.ENotFound)
	wantCode(t, db.DeleteConsumer(ctx, b.ID, cons.ID), tenants.ENotFound)
	// B's consumers can't use A's plan, and B can't add keys to A's consumer.
	err = db.CreateConsumer(ctx, &tenants.Consumer{TenantID: b.ID, Name: "bob", Plan: "gold"})
	wantCode(t, err, tenants.EValidation)
	wantCode(t, db.CreateKey(ctx, &tenants.Key{TenantID: b.ID, ConsumerID: cons.ID, Hash: tenants.HashSecret("z")}), tenants.ENotFound)
	_, _, err = db.ListKeys(ctx, b.ID, cons.ID, tenants.Page{})
	wantCode(t, err, tenants.ENotFound)
	wantCode(t, db.DeleteKey(ctx, b.ID, cons.ID, key.ID), tenants.ENotFound)
	wantCode(t, db.DeleteToken(ctx, b.ID, tok.ID), tenants.ENotFound)

	for _, list := range []func() (int, error){
		func() (int, error) { l, _, err := db.ListRoutes(ctx, b.ID, tenants.Page{}); return len(l), err },
		func() (int, error) { l, _, err := db.ListPlans(ctx, b.ID, tenants.Page{}); return len(l), err },
		func() (int, error) { l, _, err := db.ListConsumers(ctx, b.ID, tenants.Page{}); return len(l), err },
		func() (int, error) { l, _, err := db.ListTokens(ctx, b.ID, tenants.Page{}); return len(l), err },
	} {
		if n, err := list(); n != 0 || err != nil {
			t.Fatalf("tenant b lists %d of a's objects (%v)", n, err)
		}
	}
	// Deleting B leaves A whole.
	if err := db.DeleteTenant(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if rows := outboxAfter(t, conn, before); len(rows) != 1 || rows[0].Key != tenants.TenantKey(b.ID) {
		t.Fatalf("outbox: %v", rows)
	}
	if _, err := db.FindRoute(ctx, a.ID, route.ID); err != nil {
		t.Fatal(err)
	}
	if got, _, err := db.ListKeys(ctx, a.ID, cons.ID, tenants.Page{}); err != nil || len(got) != 1 {
		t.Fatalf("a's keys: %v %v", got, err)
	}
}

// Deleting a tenant deletes every one of its entries, tenant first, in one transaction.
func TestDeleteTenantOutbox(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	keep := mustTenant(t, db, "keep")
	mustRoute(t, db, newRoute(keep.ID, "r", "/r"))

	want := map[string]bool{}
	for i := 0; i < 3; i++ {
		r := mustRoute(t, db, newRoute(tn.ID, fmt.Sprintf("r%d", i), fmt.Sprintf("/r%d", i)))
		want[tenants.ObjectKey(tn.ID, tenants.KindRoute, r.ID)] = true
	}
	p := &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"}
	db.CreatePlan(ctx, p)
	want[tenants.ObjectKey(tn.ID, tenants.KindPlan, p.ID)] = true
	c := &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "gold"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	want[tenants.ObjectKey(tn.ID, tenants.KindConsumer, c.ID)] = true
	for i := 0; i < 2; i++ {
		_, hash, _ := tenants.NewSecret(tenants.KeyPrefix)
		k := &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Hash: hash}
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		want[tenants.ObjectKey(tn.ID, tenants.KindKey, k.ID)] = true
	}
	before := maxOutboxID(t, conn)
	if err := db.DeleteTenant(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != len(want)+1 || rows[0].Key != tenants.TenantKey(tn.ID) {
		t.Fatalf("outbox: %v", rows)
	}
	for _, r := range rows[1:] {
		if !want[r.Key] || r.Value != nil {
			t.Fatalf("unexpected row %v", r)
		}
		delete(want, r.Key)
	}
	for _, table := range []string{"routes", "route_paths", "plans", "consumers", "keys"} {
		var n int
		conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE tenant_id = $1`, tn.ID).Scan(&n)
		if n != 0 {
			t.Fatalf("%d rows left in %s", n, table)
		}
	}
}

// Every change's outbox rows are committed with it; nothing is written by a failed one.
func TestOutboxAtomicity(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	r := mustRoute(t, db, newRoute(tn.ID, "r", "/r"))
	before := maxOutboxID(t, conn)

	failures := []error{
		db.CreateTenant(ctx, &tenants.Tenant{Slug: "-bad"}),
		db.CreateTenant(ctx, &tenants.Tenant{Slug: "acme"}),
		db.CreateRoute(ctx, newRoute(tn.ID, "r", "/other")),
		db.CreateRoute(ctx, newRoute(tn.ID, "other", "/r")),
		db.UpdateRoute(ctx, &tenants.Route{ID: r.ID, TenantID: tn.ID, Name: "r", Paths: []string{"/r"}, Version: 7,
			Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://127.0.0.1:1"}}}}),
		db.CreateConsumer(ctx, &tenants.Consumer{TenantID: tn.ID, Name: "c", Plan: "none"}),
		db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "p", Concurrency: -1}),
	}
	for i, err := range failures {
		if err == nil {
			t.Fatalf("case %d succeeded", i)
		}
	}
	if rows := outboxAfter(t, conn, before); len(rows) != 0 {
		t.Fatalf("failed writes left outbox rows: %v", rows)
	}
	if n := maxOutboxID(t, conn); n != before {
		t.Fatalf("outbox grew")
	}
}
