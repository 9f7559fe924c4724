package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/jsonspec"
)

// routeColumns puts the spec first, so the columns of their own fill in the rest.
const routeColumns = `spec, tenant_id::text, id::text, name, version, created_at, updated_at`

func scanRoute(row pgx.Row) (*tenants.Route, error) {
	var r tenants.Route
	if err := row.Scan(&r, &r.TenantID, &r.ID, &r.Name, &r.Version, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return nil, err
	}
	if r.Methods == nil {
		r.Methods = []string{}
	}
	r.CreatedAt, r.UpdatedAt = utc(r.CreatedAt), utc(r.UpdatedAt)
	return &r, nil
}

func routeChange(r *tenants.Route) change {
	c := *r
	return put(r.TenantID, tenants.ObjectKey(r.TenantID, tenants.KindRoute, r.ID), &tenants.Entry{Route: &c})
}

func routeConflicts(r *tenants.Route) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"routes_name_key": {Code: tenants.EConflict, Field: "name", Message: fmt.Sprintf("a route named %q already exists", r.Name)},
	}
}

// CreateRoute validates r against the rules and the upstream policy, stores it with a new
// id and version 1, and fills in r. EValidation (also past the plan's routes, or a cache
// on a plan without cache_bytes), EConflict (name or path+method taken), ENotFound
// (tenant).
func (db *DB) CreateRoute(ctx context.Context, r *tenants.Route) error {
	if !parseID(r.TenantID) {
		return notFound("tenant")
	}
	if err := r.Validate(db.upstream); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return insertRoute(ctx, tx, r) })
	return constraintError(err, "create route", routeConflicts(r))
}

// insertRoute is CreateRoute's work in tx, on a validated r.
func insertRoute(ctx context.Context, tx pgx.Tx, r *tenants.Route) error {
	b := &pgx.Batch{}
	var check func(pgx.BatchResults) error
	if r.Cache == nil && len(r.Functions) == 0 {
		// Nothing to look up first: the limit's check, the route and its paths in one
		// round trip. The check's answer is read first; when it refuses, the transaction
		// rolls the route back.
		var err error
		if check, err = queueCount(ctx, tx, b, r.TenantID, tenants.ResRoutes); err != nil {
			return err
		}
	} else {
		if err := checkCount(ctx, tx, r.TenantID, tenants.ResRoutes); err != nil {
			return err
		}
		if err := checkCacheAllowed(ctx, tx, r, ""); err != nil {
			return err
		}
		if err := resolveFunctions(ctx, tx, r); err != nil {
			return err
		}
	}
	id := newID()
	spec, err := json.Marshal(r) // the server drops what is not spec, as insertRouteChunk's does
	if err != nil {
		return err
	}
	b.Queue(`INSERT INTO routes (tenant_id, id, name, spec) VALUES ($1, $2, $3, $4::text::jsonb - $5::text[])
		RETURNING `+routeColumns, r.TenantID, id, r.Name, string(spec), routeNotSpec())
	paths, methods := queueClaim(b, r.TenantID, id, r)
	br := tx.SendBatch(ctx, b)
	if check != nil {
		if err := check(br); err != nil {
			br.Close()
			return err
		}
	}
	saved, err := scanRoute(br.QueryRow())
	if err != nil {
		br.Close()
		return err
	}
	claimed, err := readClaims(br)
	if err != nil {
		br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	if err := explainClaims(ctx, tx, saved, paths, methods, claimed); err != nil {
		return err
	}
	*r = *saved
	return emit(ctx, tx, routeChange(r))
}

// claimPaths records the path+method pairs r serves, or fails with EConflict naming the
// route that already serves one of them. A path is claimed as its pattern, parameter
// names left out ("/users/{}"), since paths differing only in those match the same
// requests.
func claimPaths(ctx context.Context, tx pgx.Tx, r *tenants.Route) error {
	b := &pgx.Batch{}
	paths, ms := queueClaim(b, r.TenantID, r.ID, r)
	br := tx.SendBatch(ctx, b)
	claimed, err := readClaims(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return explainClaims(ctx, tx, r, paths, ms, claimed)
}

// pathPair is one path+method pair a route claims.
type pathPair struct{ path, method string }

// queueClaim queues in b the insert of the pairs route id (r's paths and methods)
// claims, and returns them.
func queueClaim(b *pgx.Batch, tenantID, id string, r *tenants.Route) (paths, ms []string) {
	methods := r.Methods
	if len(methods) == 0 {
		methods = []string{"*"}
	}
	for _, p := range r.Paths {
		p = tenants.PathPattern(p)
		for _, m := range methods {
			paths, ms = append(paths, p), append(ms, m)
		}
	}
	// ON CONFLICT DO NOTHING rather than a unique violation, so the conflicting pair can be
	// named from within the same transaction.
	b.Queue(`INSERT INTO route_paths (tenant_id, route_id, path, method)
		SELECT $1, $2, p, m FROM unnest($3::text[], $4::text[]) AS t (p, m)
		ON CONFLICT ON CONSTRAINT route_paths_path_key DO NOTHING
		RETURNING path, method`, tenantID, id, paths, ms)
	return paths, ms
}

// readClaims reads the pairs queueClaim's insert claimed.
func readClaims(br pgx.BatchResults) (map[pathPair]bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	claimed := map[pathPair]bool{}
	var p pathPair
	_, err = pgx.ForEachRow(rows, []any{&p.path, &p.method}, func() error {
		claimed[p] = true
		return nil
	})
	return claimed, err
}

// explainClaims fails with EConflict naming the route that serves a pair r could not
// claim.
func explainClaims(ctx context.Context, tx pgx.Tx, r *tenants.Route, paths, ms []string, claimed map[pathPair]bool) error {
	methods := r.Methods
	if len(methods) == 0 {
		methods = []string{"*"}
	}
	if len(claimed) == len(paths) {
		return nil
	}
	type pair = pathPair
	for i := range paths {
		p := pair{paths[i], ms[i]}
		if claimed[p] {
			continue
		}
		var other string
		if err := tx.QueryRow(ctx, `SELECT r.name FROM route_paths p
			JOIN routes r ON r.tenant_id = p.tenant_id AND r.id = p.route_id
			WHERE p.tenant_id = $1 AND p.path = $2 AND p.method = $3`, r.TenantID, p.path, p.method).Scan(&other); err != nil {
			return err
		}
		method := p.method
		if method == "*" {
			method = "all methods"
		}
		return &tenants.Error{
			Code:    tenants.EConflict,
			Field:   fmt.Sprintf("paths[%d]", i/len(methods)),
			Message: fmt.Sprintf("path %s (%s) is already served by route %q", r.Paths[i/len(methods)], method, other),
		}
	}
	return fmt.Errorf("route paths: %d of %d claimed, but none is taken", len(claimed), len(paths))
}

// FindRoute: ENotFound.
func (db *DB) FindRoute(ctx context.Context, tenantID, id string) (*tenants.Route, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("route")
	}
	r, err := scanRoute(db.pool.QueryRow(ctx, `SELECT `+routeColumns+` FROM routes WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("route")
	}
	return r, constraintError(err, "find route", nil)
}

// ListRoutes returns a page of the tenant's routes in creation order and the cursor of the
// next page ("" after the last).
func (db *DB) ListRoutes(ctx context.Context, tenantID string, p tenants.Page) ([]*tenants.Route, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.Route{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+routeColumns+` FROM routes
		WHERE tenant_id = $1 AND id > $2 ORDER BY routes.id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list routes", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Route, error) { return scanRoute(r) })
	if err != nil {
		return nil, "", constraintError(err, "list routes", nil)
	}
	list, next := nextCursor(list, limit, func(r *tenants.Route) string { return r.ID })
	return list, next, nil
}

// SearchRoutes returns a page of the tenant's routes whose name starts with prefix, in
// bytewise name order, and the cursor of the next page ("" after the last). The range
// scan runs on routes_name_bytes_idx: a prefix is a range in bytewise order, not
// necessarily in the database's collation. The cursor is the last name, base64url.
func (db *DB) SearchRoutes(ctx context.Context, tenantID, prefix string, p tenants.Page) ([]*tenants.Route, string, error) {
	limit, _, err := page(tenants.Page{Limit: p.Limit})
	if err != nil {
		return nil, "", err
	}
	after := "" // below every name
	if p.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		if err != nil || !utf8.Valid(b) || !strings.HasPrefix(string(b), prefix) {
			return nil, "", tenants.Errorf(tenants.EInvalidRequest, "cursor is not one this search returned")
		}
		after = string(b)
	}
	if !parseID(tenantID) || !utf8.ValidString(prefix) || strings.ContainsRune(prefix, 0) {
		return []*tenants.Route{}, "", nil
	}
	// No valid name holds U+10FFFF (names are printable), so every name that starts with
	// prefix sorts below prefix+U+10FFFF.
	rows, err := db.pool.Query(ctx, `SELECT `+routeColumns+` FROM routes
		WHERE tenant_id = $1 AND (name COLLATE "C") >= $2 AND (name COLLATE "C") > $3 AND (name COLLATE "C") < $4
		ORDER BY (name COLLATE "C") LIMIT $5`, tenantID, prefix, after, prefix+"\U0010FFFF", limit+1)
	if err != nil {
		return nil, "", constraintError(err, "search routes", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Route, error) { return scanRoute(r) })
	if err != nil {
		return nil, "", constraintError(err, "search routes", nil)
	}
	list, next := nextCursor(list, limit, func(r *tenants.Route) string { return base64.RawURLEncoding.EncodeToString([]byte(r.Name)) })
	return list, next, nil
}

// RouteNames maps those of ids that are the tenant's routes to their names.
func (db *DB) RouteNames(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	return db.names(ctx, "routes", tenantID, ids)
}

// names maps those of ids that are rows of table (routes or consumers) in the tenant to
// their names, by primary key lookups.
func (db *DB) names(ctx context.Context, table, tenantID string, ids []string) (map[string]string, error) {
	if len(ids) > tenants.MaxPageLimit {
		return nil, tenants.Errorf(tenants.EInvalidRequest, "at most %d ids at once, got %d", tenants.MaxPageLimit, len(ids))
	}
	out := make(map[string]string, len(ids))
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if parseID(id) {
			valid = append(valid, id)
		}
	}
	if !parseID(tenantID) || len(valid) == 0 {
		return out, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT id::text, name FROM `+table+` WHERE tenant_id = $1 AND id = ANY($2::uuid[])`, tenantID, valid)
	if err != nil {
		return nil, constraintError(err, "name "+table, nil)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, constraintError(err, "name "+table, nil)
		}
		out[id] = name
	}
	return out, constraintError(rows.Err(), "name "+table, nil)
}

// UpdateRoute replaces the route when r.Version is current and fills in r's new version
// and timestamps: ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdateRoute(ctx context.Context, r *tenants.Route) error {
	if !parseID(r.TenantID) || !parseID(r.ID) {
		return notFound("route")
	}
	if err := r.Validate(db.upstream); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return updateRoute(ctx, tx, r) })
	return constraintError(err, "update route", routeConflicts(r))
}

// updateRoute is UpdateRoute's work in tx, on a validated r.
func updateRoute(ctx context.Context, tx pgx.Tx, r *tenants.Route) error {
	if err := checkCacheAllowed(ctx, tx, r, r.ID); err != nil {
		return err
	}
	if err := resolveFunctions(ctx, tx, r); err != nil {
		return err
	}
	before, err := stateBefore(ctx, tx, scanRoute, `SELECT `+routeColumns+` FROM routes WHERE tenant_id = $1 AND id = $2`, r.TenantID, r.ID)
	if err != nil {
		return err
	}
	saved, err := scanRoute(tx.QueryRow(ctx, `UPDATE routes SET name = $4, spec = $5, version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+routeColumns,
		r.TenantID, r.ID, r.Version, r.Name, jsonspec.Of(r, "name")))
	if errors.Is(err, pgx.ErrNoRows) {
		return versionOrNotFound(ctx, tx, "route", `SELECT version FROM routes WHERE tenant_id = $1 AND id = $2`, r.Version, r.TenantID, r.ID)
	}
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM route_paths WHERE tenant_id = $1 AND route_id = $2`, r.TenantID, r.ID); err != nil {
		return err
	}
	if err := claimPaths(ctx, tx, saved); err != nil {
		return err
	}
	*r = *saved
	auditUpdate(tx, before, r)
	return emit(ctx, tx, routeChange(r))
}

// DeleteRoute: ENotFound.
func (db *DB) DeleteRoute(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("route")
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return deleteRoute(ctx, tx, tenantID, id) })
	return constraintError(err, "delete route", nil)
}

// deleteRoute is DeleteRoute's work in tx.
func deleteRoute(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	// The ids as stored, not as sent, build the key: "ABC…" and "abc…" are one UUID.
	var tid, rid string
	err := tx.QueryRow(ctx, `DELETE FROM routes WHERE tenant_id = $1 AND id = $2
		RETURNING tenant_id::text, id::text`, tenantID, id).Scan(&tid, &rid)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("route")
	}
	if err != nil {
		return err
	}
	uncount(ctx, tx, tid, tenants.ResRoutes)
	return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindRoute, rid)))
}

var _ tenants.RouteService = (*DB)(nil)

// insertRoutes is insertRoute for many validated routes at once (an apply's creates), in
// a few statements per thousands of routes rather than a few per route. paths are the
// routes' document paths, for errors. The tenant must be locked (an apply holds it).
func insertRoutes(ctx context.Context, tx pgx.Tx, routes []*tenants.Route, paths []string) error {
	if len(routes) == 0 {
		return nil
	}
	tenantID := routes[0].TenantID
	for i := range routes {
		if err := checkCount(ctx, tx, tenantID, tenants.ResRoutes); err != nil {
			return tenants.AtPath(paths[i], err)
		}
	}
	cached := false
	for i, r := range routes {
		if r.Cache != nil && !cached {
			// One look at the plan serves them all: a new route had no cache before.
			if err := checkCacheAllowed(ctx, tx, r, ""); err != nil {
				return tenants.AtPath(paths[i], err)
			}
			cached = true
		}
		if err := resolveFunctions(ctx, tx, r); err != nil {
			return tenants.AtPath(paths[i], err)
		}
	}
	const chunk = 5000
	for start := 0; start < len(routes); start += chunk {
		part := routes[start:min(start+chunk, len(routes))]
		if err := insertRouteChunk(ctx, tx, part, paths[start:start+len(part)]); err != nil {
			return err
		}
	}
	changes := make([]change, len(routes))
	for i, r := range routes {
		changes[i] = routeChange(r)
	}
	return emit(ctx, tx, changes...)
}

// routeNotSpec names a route's JSON members that its spec leaves out.
func routeNotSpec() []string {
	return append(jsonspec.ReadOnlyNames(reflect.TypeFor[tenants.Route]()), "name")
}

func insertRouteChunk(ctx context.Context, tx pgx.Tx, routes []*tenants.Route, docPaths []string) error {
	tenantID := routes[0].TenantID
	ids := make([]string, len(routes))
	names := make([]string, len(routes))
	specs := make([]string, len(routes))
	var pairIDs, pairPaths, pairMethods []string
	owner := map[string]int{} // route id → index
	for i, r := range routes {
		ids[i], names[i] = newID(), r.Name
		// The route's JSON as is: the server drops the members that are not spec (see
		// specOf), which costs it less than decoding and encoding it again here.
		spec, err := json.Marshal(r)
		if err != nil {
			return tenants.AtPath(docPaths[i], err)
		}
		specs[i] = string(spec)
		owner[ids[i]] = i
		methods := r.Methods
		if len(methods) == 0 {
			methods = []string{"*"}
		}
		for _, p := range r.Paths {
			p = tenants.PathPattern(p)
			for _, m := range methods {
				pairIDs, pairPaths, pairMethods = append(pairIDs, ids[i]), append(pairPaths, p), append(pairMethods, m)
			}
		}
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO routes (tenant_id, id, name, spec)
		SELECT $1, id, name, spec::jsonb - $5::text[] FROM unnest($2::uuid[], $3::text[], $4::text[]) WITH ORDINALITY AS t (id, name, spec, n)
		ORDER BY n
		RETURNING `+routeColumns, tenantID, ids, names, specs, routeNotSpec())
	b.Queue(`INSERT INTO route_paths (tenant_id, route_id, path, method)
		SELECT $1, id, p, m FROM unnest($2::uuid[], $3::text[], $4::text[]) WITH ORDINALITY AS t (id, p, m, n)
		ORDER BY n
		ON CONFLICT ON CONSTRAINT route_paths_path_key DO NOTHING
		RETURNING route_id::text, path, method`, tenantID, pairIDs, pairPaths, pairMethods)
	br := tx.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return constraintError(err, "create routes", nil)
	}
	saved, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Route, error) { return scanRoute(r) })
	if err != nil {
		br.Close()
		return err
	}
	rows, err = br.Query()
	if err != nil {
		br.Close()
		return err
	}
	type claim struct{ id, path, method string }
	claimed := map[claim]bool{}
	var c claim
	if _, err := pgx.ForEachRow(rows, []any{&c.id, &c.path, &c.method}, func() error {
		claimed[c] = true
		return nil
	}); err != nil {
		br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	for _, s := range saved {
		*routes[owner[s.ID]] = *s
	}
	if len(claimed) == len(pairIDs) {
		return nil
	}
	// Name the first route, in the document's order of writes, that lost a pair.
	for k := range pairIDs {
		if claimed[claim{pairIDs[k], pairPaths[k], pairMethods[k]}] {
			continue
		}
		i := owner[pairIDs[k]]
		r := routes[i]
		got := map[pathPair]bool{}
		for q := range pairIDs {
			if pairIDs[q] == r.ID && claimed[claim{pairIDs[q], pairPaths[q], pairMethods[q]}] {
				got[pathPair{pairPaths[q], pairMethods[q]}] = true
			}
		}
		var ps, ms []string
		for q := range pairIDs {
			if pairIDs[q] == r.ID {
				ps, ms = append(ps, pairPaths[q]), append(ms, pairMethods[q])
			}
		}
		return tenants.AtPath(docPaths[i], explainClaims(ctx, tx, r, ps, ms, got))
	}
	return fmt.Errorf("route paths: %d of %d claimed, but none is taken", len(claimed), len(pairIDs))
}
