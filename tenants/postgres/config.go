package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/named"
)

// Config as code (tenants.ConfigService): a tenant's config read whole, and a document
// applied as the writes of each object would be, all in one transaction, so the edges see
// one burst of entries and a failure anywhere changes nothing.

// configState is a tenant's config as stored, each list sorted by name.
type configState struct {
	slug        string
	routes      []*tenants.Route
	consumers   []*tenants.Consumer
	plans       []*tenants.ConsumerPlan
	issuers     []*tenants.Issuer
	accessRules *tenants.AccessRules // nil: none
	domains     []*tenants.Domain
	functions   []configFunction
}

// collect queues in b the query of a list, which it fills in dst.
func collect[T any](b *pgx.Batch, dst *[]*T, scan func(pgx.Row) (*T, error), query, tenantID string) {
	b.Queue(query, tenantID).Query(func(rows pgx.Rows) error {
		var err error
		*dst, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*T, error) { return scan(r) })
		return err
	})
}

// loadConfig reads the tenant's config in tx; lock takes the tenant's row (two applies to
// one tenant run one after the other); timeout, in ms, bounds tx's statements. ENotFound.
func loadConfig(ctx context.Context, tx pgx.Tx, tenantID string, lock bool, timeout string) (*configState, error) {
	q := `SELECT slug FROM tenants WHERE id = $1`
	if lock {
		q += ` FOR NO KEY UPDATE`
	}
	var st configState
	// One round trip: the tenant (locked first), then its objects.
	found := false
	b := &pgx.Batch{}
	if timeout != "" {
		b.Queue(`SELECT set_config('statement_timeout', $1, true)`, timeout)
	}
	b.Queue(q, tenantID).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&st.slug}, func() error { found = true; return nil })
		return err
	})
	collect(b, &st.routes, scanRoute, `SELECT `+routeColumns+` FROM routes WHERE tenant_id = $1 ORDER BY name`, tenantID)
	collect(b, &st.consumers, scanConsumer, `SELECT `+consumerColumns+` FROM consumers WHERE tenant_id = $1 ORDER BY name`, tenantID)
	collect(b, &st.plans, scanPlan, `SELECT `+planColumns+` FROM plans WHERE tenant_id = $1 ORDER BY name`, tenantID)
	collect(b, &st.issuers, scanIssuer, `SELECT `+issuerColumns+` FROM jwt_issuers WHERE tenant_id = $1 ORDER BY issuer`, tenantID)
	collect(b, &st.domains, scanDomain, `SELECT `+domainColumns+` FROM domains WHERE tenant_id = $1 ORDER BY hostname`, tenantID)
	var rules []*tenants.AccessRules
	collect(b, &rules, scanAccessRules, `SELECT `+accessRulesColumns+` FROM policies WHERE tenant_id = $1`, tenantID)
	queueConfigFunctions(b, &st.functions, tenantID)
	if wt, ok := tx.(*writeTx); ok && lock && !wt.separateTrips {
		queueCountMemo(ctx, b, tenantID)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if !found {
		return nil, notFound("tenant")
	}
	if len(rules) > 0 {
		st.accessRules = rules[0]
	}
	return &st, nil
}

// loadVersions reads what revision needs of the tenant's config, and no more: an apply
// of thousands of objects stamps its result without reading them back whole.
func loadVersions(ctx context.Context, tx pgx.Tx, tenantID string) (*configState, error) {
	var st configState
	b := &pgx.Batch{}
	for _, q := range []struct {
		query string
		add   func(id string, v int64)
	}{
		{`SELECT id::text, version FROM routes WHERE tenant_id = $1`, func(id string, v int64) {
			st.routes = append(st.routes, &tenants.Route{ID: id, Version: v})
		}},
		{`SELECT id::text, version FROM consumers WHERE tenant_id = $1`, func(id string, v int64) {
			st.consumers = append(st.consumers, &tenants.Consumer{ID: id, Version: v})
		}},
		{`SELECT id::text, version FROM plans WHERE tenant_id = $1`, func(id string, v int64) {
			st.plans = append(st.plans, &tenants.ConsumerPlan{ID: id, Version: v})
		}},
		{`SELECT id::text, version FROM jwt_issuers WHERE tenant_id = $1`, func(id string, v int64) {
			st.issuers = append(st.issuers, &tenants.Issuer{ID: id, Version: v})
		}},
		{`SELECT '', version FROM policies WHERE tenant_id = $1`, func(_ string, v int64) {
			st.accessRules = &tenants.AccessRules{Version: v}
		}},
	} {
		b.Queue(q.query, tenantID).Query(func(rows pgx.Rows) error {
			var (
				id string
				v  int64
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
				q.add(id, v)
				return nil
			})
			return err
		})
	}
	b.Queue(`SELECT id::text, hostname FROM domains WHERE tenant_id = $1`, tenantID).Query(func(rows pgx.Rows) error {
		var id, host string
		_, err := pgx.ForEachRow(rows, []any{&id, &host}, func() error {
			st.domains = append(st.domains, &tenants.Domain{ID: id, Hostname: host})
			return nil
		})
		return err
	})
	queueConfigFunctions(b, &st.functions, tenantID)
	return &st, tx.SendBatch(ctx, b).Close()
}

// revision stamps the state: every object's id and version. A domain counts by its id and
// host name only, since its version also follows the DNS proof's checks and its
// certificate's renewals, which are not in the document.
func (st *configState) revision() string {
	var lines []string
	for _, r := range st.routes {
		lines = append(lines, fmt.Sprintf("route %s %d", r.ID, r.Version))
	}
	for _, c := range st.consumers {
		lines = append(lines, fmt.Sprintf("consumer %s %d", c.ID, c.Version))
	}
	for _, p := range st.plans {
		lines = append(lines, fmt.Sprintf("plan %s %d", p.ID, p.Version))
	}
	for _, is := range st.issuers {
		lines = append(lines, fmt.Sprintf("jwt_issuer %s %d", is.ID, is.Version))
	}
	if st.accessRules != nil {
		lines = append(lines, fmt.Sprintf("policy %d", st.accessRules.Version))
	}
	for _, d := range st.domains {
		lines = append(lines, fmt.Sprintf("domain %s %s", d.ID, d.Hostname))
	}
	for _, f := range st.functions {
		lines = append(lines, fmt.Sprintf("function %s %s", f.name, f.sha))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:12])
}

// withCreated is st once plan is applied, when all it did was create objects (their
// inserts filled in their ids and versions), so no read is needed; otherwise, or not
// folded (see WithFoldedRoundTrips), nil.
func (st *configState) withCreated(doc *tenants.ConfigDocument, plan *tenants.ConfigPlan, fold bool) *configState {
	if len(plan.Updated) > 0 || len(plan.Deleted) > 0 || slices.ContainsFunc(plan.Created, func(c tenants.ConfigChange) bool {
		return c.Kind == tenants.ConfigKindAccessRules
	}) || !fold {
		return nil
	}
	after := *st
	after.routes = named.AppendNew(st.routes, doc.Routes, func(r *tenants.Route) string { return r.Name })
	after.consumers = named.AppendNew(st.consumers, doc.Consumers, func(c *tenants.Consumer) string { return c.Name })
	after.plans = named.AppendNew(st.plans, doc.Plans, func(p *tenants.ConsumerPlan) string { return p.Name })
	after.issuers = named.AppendNew(st.issuers, doc.JWTIssuers, func(is *tenants.Issuer) string { return is.Issuer })
	return &after
}

// document is the state as a config document: the objects without their secrets.
func (st *configState) document() *tenants.ConfigDocument {
	doc := &tenants.ConfigDocument{
		Version:     tenants.ConfigDocumentVersion,
		Tenant:      st.slug,
		Revision:    st.revision(),
		Routes:      st.routes,
		Consumers:   st.consumers,
		Plans:       st.plans,
		JWTIssuers:  make([]*tenants.Issuer, len(st.issuers)),
		AccessRules: st.accessRules,
		Domains:     make([]tenants.ConfigDomain, len(st.domains)),
		Functions:   make([]tenants.ConfigFunction, len(st.functions)),
	}
	for i, f := range st.functions {
		doc.Functions[i] = tenants.ConfigFunction{Name: f.name, SHA256: f.sha}
	}
	for i, is := range st.issuers {
		c := *is
		c.HS256Secret = ""
		doc.JWTIssuers[i] = &c
	}
	for i, d := range st.domains {
		doc.Domains[i] = tenants.ConfigDomain{Hostname: d.Hostname, Status: d.Status}
	}
	doc.Sort() // ORDER BY follows the database's collation; the document sorts bytewise
	return doc
}

// ExportConfig returns the tenant's config document, read in one snapshot: ENotFound.
func (db *DB) ExportConfig(ctx context.Context, tenantID string) (*tenants.ConfigDocument, error) {
	if !parseID(tenantID) {
		return nil, notFound("tenant")
	}
	var doc *tenants.ConfigDocument
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		st, err := loadConfig(ctx, tx, tenantID, false, "")
		if err != nil {
			return err
		}
		doc = st.document()
		return nil
	})
	if err != nil {
		return nil, constraintError(err, "export config", nil)
	}
	return doc, nil
}

// errNothingToCommit rolls back an apply that is dry or changes nothing, so it leaves no
// audit entry either.
var errNothingToCommit = errors.New("nothing to commit")

// ApplyConfig makes the tenant's config what doc says (tenants.ConfigService). Each object
// is validated and written as its own create, update or delete would be, in one
// transaction: creates and updates of plans first (consumers name them), then consumers,
// the deletes of plans (once no consumer names them), routes (deletes before updates
// before creates, so paths move between routes), JWT issuers, the access rules and the
// domains. The transaction records ctx's audit entry once.
func (db *DB) ApplyConfig(ctx context.Context, tenantID string, doc *tenants.ConfigDocument, o tenants.ApplyOptions) (*tenants.ConfigPlan, error) {
	if !parseID(tenantID) {
		return nil, notFound("tenant")
	}
	if err := doc.CheckNames(); err != nil {
		return nil, err
	}
	var plan *tenants.ConfigPlan
	err := db.write(ctx, func(tx pgx.Tx) error {
		ctx, timeout := withCountMemo(ctx), "" // an attempt's counts are its own
		// A large document's statements (thousands of rows each) may outlast the bound
		// of one statement: the caller's deadline bounds them instead.
		if d, ok := ctx.Deadline(); ok && db.timeout > 0 && time.Until(d) > db.timeout {
			timeout = strconv.FormatInt(time.Until(d).Milliseconds(), 10) // set with the config's read
		}
		if timeout != "" && db.separateTrips {
			if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, timeout); err != nil {
				return err
			}
			timeout = ""
		}
		// Its audit entry is of the tenant as a whole, not of the first object changed,
		// and says which objects changed and how.
		auditObject(tx, tenantID, "")
		auditBulk(tx)
		st, err := loadConfig(ctx, tx, tenantID, true, timeout)
		if err != nil {
			return err
		}
		if doc.Tenant != st.slug {
			return tenants.Invalid("tenant", "the document is of tenant %q, not %q", doc.Tenant, st.slug)
		}
		var (
			ops     []func() error
			updated []tenants.ObjectChange
		)
		plan, ops, updated, err = db.planConfig(ctx, tx, tenantID, st, doc, o.Prune)
		if err != nil {
			return err
		}
		plan.Revision = st.revision()
		if plan.Changes() == 0 {
			return errNothingToCommit
		}
		if doc.Revision != "" && doc.Revision != plan.Revision && !o.Force {
			e := tenants.Errorf(tenants.EVersionConflict, "the document was exported at revision %s and the tenant's config has changed since (now %s): export it again and redo the edit, or apply with force to overwrite", doc.Revision, plan.Revision)
			e.Field = "revision"
			return e
		}
		for _, op := range ops {
			if err := op(); err != nil {
				return err
			}
		}
		if o.DryRun {
			return errNothingToCommit
		}
		after, err := st.withCreated(doc, plan, !db.separateTrips), error(nil)
		if after == nil {
			if after, err = loadVersions(ctx, tx, tenantID); err != nil {
				return err
			}
		}
		plan.Revision, plan.Applied = after.revision(), true
		auditChanges(tx, &tenants.AuditChanges{Created: plan.Created, Updated: updated, Deleted: plan.Deleted})
		return nil
	})
	if errors.Is(err, errNothingToCommit) {
		return plan, nil
	}
	if err != nil {
		return nil, constraintError(err, "apply config", nil)
	}
	return plan, nil
}

// same reports whether two objects agree on everything a document sets.
func same(a, b any) bool {
	x, err1 := tenants.WritableJSON(a)
	y, err2 := tenants.WritableJSON(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// configOps collects an apply's plan and its writes in the order they must run, and the
// fields each update changes, for the audit log.
type configOps struct {
	plan                                     *tenants.ConfigPlan
	updated                                  []tenants.ObjectChange
	planWrites, consumers, planDeletes, rest []func() error
}

// at runs op and names the document path in its error; byConstraint maps the store's
// constraint errors as the object's own write does.
func at(path, op string, byConstraint map[string]*tenants.Error, fn func() error) func() error {
	return func() error {
		return tenants.AtPath(path, constraintError(fn(), op, byConstraint))
	}
}

// planConfig validates doc's objects, compares them with st and returns the plan and the
// writes that carry it out, in order. Validation errors name the document path.
func (db *DB) planConfig(ctx context.Context, tx pgx.Tx, tenantID string, st *configState, doc *tenants.ConfigDocument, prune bool) (*tenants.ConfigPlan, []func() error, []tenants.ObjectChange, error) {
	c := &configOps{plan: &tenants.ConfigPlan{Created: []tenants.ConfigChange{}, Updated: []tenants.ConfigChange{}, Deleted: []tenants.ConfigChange{}}}
	change := func(list *[]tenants.ConfigChange, kind, name string) {
		*list = append(*list, tenants.ConfigChange{Kind: kind, Name: name})
	}

	if doc.Plans != nil {
		w, err := diffObjects(c, &objectKind[tenants.ConsumerPlan]{
			kind: tenants.ConfigKindPlan, field: "plans", noun: "plan",
			name: func(p *tenants.ConsumerPlan) string { return p.Name }, id: func(p *tenants.ConsumerPlan) string { return p.ID },
			adopt:     func(want, cur *tenants.ConsumerPlan) { want.ID, want.Version = cur.ID, cur.Version },
			check:     func(want, _ *tenants.ConsumerPlan) error { want.TenantID = tenantID; return want.Validate() },
			conflicts: planConflicts, removeConflicts: planDeleteConflicts,
			insert: func(p *tenants.ConsumerPlan) error { return insertPlan(ctx, tx, p) },
			update: func(p *tenants.ConsumerPlan) error { return updatePlan(ctx, tx, p) },
			remove: func(id string) error { return deletePlan(ctx, tx, tenantID, id) },
		}, doc.Plans, st.plans, prune)
		if err != nil {
			return nil, nil, nil, err
		}
		// Plans are written before the consumers that may name them, and deleted after.
		c.planWrites, c.planDeletes = slices.Concat(w.updates, w.creates), w.deletes
	}

	if doc.Consumers != nil {
		w, err := diffObjects(c, &objectKind[tenants.Consumer]{
			kind: tenants.ConfigKindConsumer, field: "consumers", noun: "consumer",
			name: func(c *tenants.Consumer) string { return c.Name }, id: func(c *tenants.Consumer) string { return c.ID },
			adopt:     func(want, cur *tenants.Consumer) { want.ID, want.Version = cur.ID, cur.Version },
			check:     func(want, _ *tenants.Consumer) error { want.TenantID = tenantID; return want.Validate() },
			conflicts: consumerErrors,
			insert:    func(c *tenants.Consumer) error { return insertConsumer(ctx, tx, c) },
			update:    func(c *tenants.Consumer) error { return updateConsumer(ctx, tx, c) },
			remove:    func(id string) error { return deleteConsumer(ctx, tx, tenantID, id) },
		}, doc.Consumers, st.consumers, prune)
		if err != nil {
			return nil, nil, nil, err
		}
		c.consumers = slices.Concat(w.deletes, w.updates, w.creates)
	}

	// Functions: which uploaded version is current. Made current before the routes are
	// written, so a route naming a function without a digest gets the document's.
	current := make(map[string]string, len(st.functions))
	for _, f := range st.functions {
		current[f.name] = f.sha
	}
	var functionDeletes []func() error
	if doc.Functions != nil {
		left := maps.Clone(current)
		for i, f := range doc.Functions {
			path := fmt.Sprintf("functions[%d]", i)
			have, ok := current[f.Name]
			switch {
			case !ok:
				return nil, nil, nil, tenants.Invalid(path+".name", "the tenant has no function named %q: upload its module (PUT /v1/tenants/%s/functions/%s); a document names functions, it does not upload them", f.Name, st.slug, f.Name)
			case have == f.SHA256:
				c.plan.Unchanged++
			default:
				change(&c.plan.Updated, tenants.ConfigKindFunction, f.Name)
				c.updated = append(c.updated, tenants.ObjectChange{Kind: tenants.ConfigKindFunction, Name: f.Name,
					Fields: map[string]tenants.FieldChange{"sha256": {Before: jsonString(have), After: jsonString(f.SHA256)}}})
				c.planWrites = append(c.planWrites, at(path, "update function", nil, func() error {
					return setCurrentFunction(ctx, tx, tenantID, f.Name, f.SHA256)
				}))
				current[f.Name] = f.SHA256
			}
			delete(left, f.Name)
		}
		if prune {
			for _, f := range st.functions {
				if _, gone := left[f.name]; gone {
					change(&c.plan.Deleted, tenants.ConfigKindFunction, f.name)
					functionDeletes = append(functionDeletes, at("functions", "delete function", nil, func() error {
						return deleteFunction(ctx, tx, tenantID, f.name)
					}))
				}
			}
		}
	}

	if doc.Routes != nil {
		w, err := diffObjects(c, &objectKind[tenants.Route]{
			kind: tenants.ConfigKindRoute, field: "routes", noun: "route",
			name: func(r *tenants.Route) string { return r.Name }, id: func(r *tenants.Route) string { return r.ID },
			adopt: func(want, cur *tenants.Route) { want.ID, want.Version = cur.ID, cur.Version },
			check: func(want, _ *tenants.Route) error {
				want.TenantID = tenantID
				// As the store would on save: a function named without a digest runs the
				// current version, so an exported document compares equal.
				for i := range want.Functions {
					if want.Functions[i].SHA256 == "" {
						want.Functions[i].SHA256 = current[want.Functions[i].Name]
					}
				}
				return want.Validate(db.upstream)
			},
			conflicts: routeConflicts,
			insert:    func(r *tenants.Route) error { return insertRoute(ctx, tx, r) },
			insertAll: func(rs []*tenants.Route, paths []string) error { return insertRoutes(ctx, tx, rs, paths) },
			update:    func(r *tenants.Route) error { return updateRoute(ctx, tx, r) },
			remove:    func(id string) error { return deleteRoute(ctx, tx, tenantID, id) },
		}, doc.Routes, st.routes, prune)
		if err != nil {
			return nil, nil, nil, err
		}
		c.rest = append(c.rest, w.deletes...)
		if len(w.updated) > 1 {
			// The updated routes give up their paths first, so two of them may swap paths.
			c.rest = append(c.rest, func() error {
				_, err := tx.Exec(ctx, `DELETE FROM route_paths WHERE tenant_id = $1 AND route_id = ANY($2::uuid[])`, tenantID, w.updated)
				return err
			})
		}
		c.rest = append(append(c.rest, w.updates...), w.creates...)
	}

	if doc.JWTIssuers != nil {
		w, err := diffObjects(c, &objectKind[tenants.Issuer]{
			kind: tenants.ConfigKindJWTIssuer, field: "jwt_issuers", noun: "jwt issuer",
			name: func(is *tenants.Issuer) string { return is.Issuer }, id: func(is *tenants.Issuer) string { return is.ID },
			adopt: func(want, cur *tenants.Issuer) { want.ID, want.Version = cur.ID, cur.Version },
			check: func(want, cur *tenants.Issuer) error {
				want.TenantID = tenantID
				// As on PUT: an issuer naming no key source keeps its stored secret, which
				// export leaves out.
				if cur != nil && want.JWKSURL == "" && want.Keys == nil && want.HS256Secret == "" {
					want.HS256Secret = cur.HS256Secret
				}
				return db.validateIssuer(want)
			},
			conflicts: issuerConflicts,
			insert:    func(is *tenants.Issuer) error { return insertIssuer(ctx, tx, is) },
			update:    func(is *tenants.Issuer) error { return updateIssuer(ctx, tx, is) },
			remove:    func(id string) error { return deleteIssuer(ctx, tx, tenantID, id) },
		}, doc.JWTIssuers, st.issuers, prune)
		if err != nil {
			return nil, nil, nil, err
		}
		c.rest = append(c.rest, slices.Concat(w.deletes, w.updates, w.creates)...)
	}

	if want := doc.AccessRules; want != nil {
		want.TenantID = tenantID
		if want.Rules == nil {
			want.Rules = [][]string{}
		}
		if want.Roles == nil {
			want.Roles = [][]string{}
		}
		switch {
		case st.accessRules == nil:
			change(&c.plan.Created, tenants.ConfigKindAccessRules, tenants.ConfigKindAccessRules)
		case !same(st.accessRules, want):
			change(&c.plan.Updated, tenants.ConfigKindAccessRules, tenants.ConfigKindAccessRules)
			c.updated = append(c.updated, tenants.ObjectChange{Kind: tenants.ConfigKindAccessRules, Name: tenants.ConfigKindAccessRules,
				Fields: tenants.DiffFields(st.accessRules, want)})
		default:
			c.plan.Unchanged++
		}
		if st.accessRules == nil || !same(st.accessRules, want) {
			want.Version = 0 // the transaction holds the tenant: replace what it read
			c.rest = append(c.rest, at("policy", "put policy", nil, func() error { return putAccessRules(ctx, tx, want) }))
		}
	}

	if doc.Domains != nil {
		have := named.Index(st.domains, func(d *tenants.Domain) string { return d.Hostname })
		for i, d := range doc.Domains {
			host := strings.ToLower(strings.TrimSuffix(d.Hostname, "."))
			if have[host] == nil {
				return nil, nil, nil, tenants.Invalid(fmt.Sprintf("domains[%d].hostname", i),
					"the tenant has no custom domain %q: claim it with its certificate and key (POST /v1/tenants/%s/domains); a document keeps or removes domains, it does not claim them", d.Hostname, st.slug)
			}
			c.plan.Unchanged++
			delete(have, host)
		}
		if prune {
			for _, cur := range st.domains {
				if _, left := have[cur.Hostname]; left {
					change(&c.plan.Deleted, tenants.ConfigKindDomain, cur.Hostname)
					c.rest = append(c.rest, at("domains", "delete domain", nil, func() error { return deleteDomain(ctx, tx, tenantID, cur.ID) }))
				}
			}
		}
	}

	// Functions go last: the routes that ran them are deleted or changed by then.
	ops := slices.Concat(c.planWrites, c.consumers, c.planDeletes, c.rest, functionDeletes)
	return c.plan, ops, c.updated, nil
}

// objectKind is how an apply tells one kind of a document's objects apart, checks them
// and writes them; diffObjects does the same for routes, consumers, plans and issuers.
type objectKind[T any] struct {
	kind, field, noun string // the plan's kind, the document's field, the noun in store errors
	name, id          func(*T) string
	adopt             func(want, cur *T) // carries the stored object's id and version over
	// check fills in what the document leaves to the store, then validates; cur is nil
	// for a new object.
	check           func(want, cur *T) error
	conflicts       func(*T) map[string]*tenants.Error
	removeConflicts map[string]*tenants.Error
	insert, update  func(*T) error
	// insertAll, when set, creates all the new objects at once (paths: their document
	// paths), instead of insert on each.
	insertAll func(objs []*T, paths []string) error
	remove    func(id string) error
}

// objectWrites are one kind's writes by what they do, for the caller to order; updated
// lists the ids of the objects updated.
type objectWrites struct {
	creates, updates, deletes []func() error
	updated                   []string
}

// diffObjects compares a document's objects of one kind (want) with the stored ones
// (have) by name, records the differences in plan and returns the writes that carry them
// out; with prune, stored objects the document leaves out are deleted. Errors name the
// document path.
func diffObjects[T any](c *configOps, k *objectKind[T], want, have []*T, prune bool) (objectWrites, error) {
	var w objectWrites
	plan := c.plan
	left := named.Index(have, k.name)
	var (
		created      []*T
		createdPaths []string
	)
	for i, name := range named.Sorted(want, k.name) {
		obj, path := want[i], fmt.Sprintf("%s[%d]", k.field, i)
		cur := left[name]
		if err := k.check(obj, cur); err != nil {
			return w, tenants.AtPath(path, err)
		}
		switch {
		case cur == nil:
			plan.Created = append(plan.Created, tenants.ConfigChange{Kind: k.kind, Name: name})
			if k.insertAll != nil {
				created, createdPaths = append(created, obj), append(createdPaths, path)
				break
			}
			w.creates = append(w.creates, at(path, "create "+k.noun, k.conflicts(obj), func() error { return k.insert(obj) }))
		case !same(cur, obj):
			k.adopt(obj, cur)
			plan.Updated = append(plan.Updated, tenants.ConfigChange{Kind: k.kind, Name: name})
			c.updated = append(c.updated, tenants.ObjectChange{Kind: k.kind, Name: name, Fields: tenants.DiffFields(cur, obj)})
			w.updated = append(w.updated, k.id(cur))
			w.updates = append(w.updates, at(path, "update "+k.noun, k.conflicts(obj), func() error { return k.update(obj) }))
		default:
			plan.Unchanged++
		}
		delete(left, name)
	}
	if len(created) > 0 {
		w.creates = append(w.creates, func() error { return k.insertAll(created, createdPaths) })
	}
	if prune {
		for _, cur := range have {
			if _, gone := left[k.name(cur)]; gone {
				plan.Deleted = append(plan.Deleted, tenants.ConfigChange{Kind: k.kind, Name: k.name(cur)})
				w.deletes = append(w.deletes, at(k.field, "delete "+k.noun, k.removeConflicts, func() error { return k.remove(k.id(cur)) }))
			}
		}
	}
	return w, nil
}

var _ tenants.ConfigService = (*DB)(nil)

// jsonString is s as a JSON string.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
