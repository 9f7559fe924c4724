package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Functions: a tenant's WebAssembly modules by name and version (migration 00020). A
// route names the version it runs by digest in its spec; resolveFunctions fills the
// digest of a name given without one, in the transaction that saves the route, holding
// the function row shared so a concurrent DeleteFunction (which takes it exclusively and
// then looks for routes that use it) either sees the route or is seen by it.
//
// The object store's copies of modules are deleted by a sweep (infra/functionstore.Sweep)
// once nothing here names them. An upload puts its module in the object store before its
// transaction, so a sweep could delete the object between the two when the same bytes were
// uploaded long ago and since dropped: PutFunction therefore holds the module's lock shared
// (moduleLock) until it commits, DropModule holds it exclusively while it checks and
// deletes, and the api puts the module again after the commit.

const functionColumns = `f.name, f.version, v.sha256, m.size, v.created_at, v.created_by`

const functionFrom = ` FROM functions f
	JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name AND v.version = f.version
	JOIN function_modules m ON m.tenant_id = v.tenant_id AND m.sha256 = v.sha256`

func scanFunction(row pgx.Row) (*tenants.Function, error) {
	var f tenants.Function
	if err := row.Scan(&f.Name, &f.Version, &f.SHA256, &f.Size, &f.CreatedAt, &f.CreatedBy); err != nil {
		return nil, err
	}
	f.CreatedAt = utc(f.CreatedAt)
	f.Routes = []string{}
	return &f, nil
}

// functionUse is one route's use of one function version.
type functionUse struct{ name, sha, routeID string }

// functionUses lists the tenant's routes' uses of its functions (of name only, when not
// ""), in tx q, or on db's pool when q is nil.
func functionUses(ctx context.Context, q pgx.Tx, db *DB, tenantID, name string) ([]functionUse, error) {
	const query = `SELECT f->>'name', coalesce(f->>'sha256', ''), r.id::text FROM routes r,
		jsonb_array_elements(CASE jsonb_typeof(r.spec->'functions') WHEN 'array' THEN r.spec->'functions' ELSE '[]' END) f
		WHERE r.tenant_id = $1 AND ($2 = '' OR f->>'name' = $2) ORDER BY r.id`
	var (
		rows pgx.Rows
		err  error
	)
	if q != nil {
		rows, err = q.Query(ctx, query, tenantID, name)
	} else {
		rows, err = db.pool.Query(ctx, query, tenantID, name)
	}
	if err != nil {
		return nil, err
	}
	var (
		u    functionUse
		uses []functionUse
	)
	_, err = pgx.ForEachRow(rows, []any{&u.name, &u.sha, &u.routeID}, func() error {
		uses = append(uses, u)
		return nil
	})
	return uses, err
}

// addRoutes fills the Routes of fs (and of their versions) from uses, each route once.
func addRoutes(fs []*tenants.Function, uses []functionUse) {
	byName := make(map[string]*tenants.Function, len(fs))
	for _, f := range fs {
		byName[f.Name] = f
	}
	for _, u := range uses {
		f := byName[u.name]
		if f == nil {
			continue
		}
		if !slices.Contains(f.Routes, u.routeID) {
			f.Routes = append(f.Routes, u.routeID)
		}
		for i := range f.Versions {
			if v := &f.Versions[i]; v.SHA256 == u.sha && !slices.Contains(v.Routes, u.routeID) {
				v.Routes = append(v.Routes, u.routeID)
			}
		}
	}
}

func digest(module []byte) string {
	sum := sha256.Sum256(module)
	return hex.EncodeToString(sum[:])
}

// PutFunction stores module as the function's new current version (see
// tenants.FunctionService).
func (db *DB) PutFunction(ctx context.Context, tenantID, name string, module []byte, createdBy string) (*tenants.Function, error) {
	if err := tenants.ValidateFunctionName(name); err != nil {
		return nil, tenants.Invalid("name", "%v", err)
	}
	if !parseID(tenantID) {
		return nil, notFound("tenant")
	}
	sha := digest(module)
	var saved *tenants.Function
	err := db.write(ctx, func(tx pgx.Tx) error {
		plan, limit, err := lockTenantLimit(ctx, tx, tenantID, tenants.ResFunctionBytes)
		if err != nil {
			return err
		}
		if int64(len(module)) > limit {
			e := tenants.OverLimit(tenants.ResFunctionBytes, plan, limit)
			e.Message += fmt.Sprintf(" (this one has %d)", len(module))
			return e
		}
		var version int64
		var current string
		err = tx.QueryRow(ctx, `SELECT f.version, v.sha256 FROM functions f
			JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name AND v.version = f.version
			WHERE f.tenant_id = $1 AND f.name = $2 FOR UPDATE OF f`, tenantID, name).Scan(&version, &current)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if err := checkCount(ctx, tx, tenantID, tenants.ResFunctions); err != nil {
				return err
			}
			version = 0
			if _, err := tx.Exec(ctx, `INSERT INTO functions (tenant_id, name, version) VALUES ($1, $2, 1)`, tenantID, name); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		if current != sha {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2)`, moduleLockClass, moduleLockKey(sha)); err != nil {
				return err
			}
			version++
			if _, err := tx.Exec(ctx, `INSERT INTO function_modules (tenant_id, sha256, size, module) VALUES ($1, $2, $3, $4)
				ON CONFLICT (tenant_id, sha256) DO NOTHING`, tenantID, sha, len(module), module); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO function_versions (tenant_id, name, version, sha256, created_by)
				VALUES ($1, $2, $3, $4, $5)`, tenantID, name, version, sha, createdBy); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE functions SET version = $3, updated_at = now() WHERE tenant_id = $1 AND name = $2`,
				tenantID, name, version); err != nil {
				return err
			}
		}
		saved, err = scanFunction(tx.QueryRow(ctx, `SELECT `+functionColumns+functionFrom+` WHERE f.tenant_id = $1 AND f.name = $2`, tenantID, name))
		if err != nil {
			return err
		}
		uses, err := functionUses(ctx, tx, db, tenantID, name)
		addRoutes([]*tenants.Function{saved}, uses)
		return err
	})
	if err != nil {
		return nil, constraintError(err, "put function", nil)
	}
	return saved, nil
}

// FindFunction: ENotFound.
func (db *DB) FindFunction(ctx context.Context, tenantID, name string, versions bool) (*tenants.Function, error) {
	if !parseID(tenantID) || tenants.ValidateFunctionName(name) != nil {
		return nil, notFound("function")
	}
	f, err := scanFunction(db.pool.QueryRow(ctx, `SELECT `+functionColumns+functionFrom+` WHERE f.tenant_id = $1 AND f.name = $2`, tenantID, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("function")
	}
	if err != nil {
		return nil, constraintError(err, "find function", nil)
	}
	if versions {
		rows, err := db.pool.Query(ctx, `SELECT v.version, v.sha256, m.size, v.created_at, v.created_by FROM function_versions v
			JOIN function_modules m ON m.tenant_id = v.tenant_id AND m.sha256 = v.sha256
			WHERE v.tenant_id = $1 AND v.name = $2 ORDER BY v.version DESC`, tenantID, name)
		if err != nil {
			return nil, constraintError(err, "find function", nil)
		}
		var v tenants.FunctionVersion
		if _, err := pgx.ForEachRow(rows, []any{&v.Version, &v.SHA256, &v.Size, &v.CreatedAt, &v.CreatedBy}, func() error {
			v.CreatedAt = utc(v.CreatedAt)
			v.Routes = []string{}
			f.Versions = append(f.Versions, v)
			return nil
		}); err != nil {
			return nil, constraintError(err, "find function", nil)
		}
	}
	uses, err := functionUses(ctx, nil, db, tenantID, name)
	if err != nil {
		return nil, constraintError(err, "find function", nil)
	}
	addRoutes([]*tenants.Function{f}, uses)
	return f, nil
}

// ListFunctions returns the tenant's functions by name.
func (db *DB) ListFunctions(ctx context.Context, tenantID string) ([]*tenants.Function, error) {
	if !parseID(tenantID) {
		return []*tenants.Function{}, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+functionColumns+functionFrom+` WHERE f.tenant_id = $1 ORDER BY f.name`, tenantID)
	if err != nil {
		return nil, constraintError(err, "list functions", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Function, error) { return scanFunction(r) })
	if err != nil {
		return nil, constraintError(err, "list functions", nil)
	}
	uses, err := functionUses(ctx, nil, db, tenantID, "")
	if err != nil {
		return nil, constraintError(err, "list functions", nil)
	}
	addRoutes(list, uses)
	if list == nil {
		list = []*tenants.Function{}
	}
	return list, nil
}

// FunctionModule returns a version's module ("" for the current one): ENotFound.
func (db *DB) FunctionModule(ctx context.Context, tenantID, name, sha string) ([]byte, error) {
	if !parseID(tenantID) || tenants.ValidateFunctionName(name) != nil || sha != "" && !tenants.ValidDigest(sha) {
		return nil, notFound("function")
	}
	var module []byte
	err := db.pool.QueryRow(ctx, `SELECT m.module FROM functions f
		JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name
		JOIN function_modules m ON m.tenant_id = v.tenant_id AND m.sha256 = v.sha256
		WHERE f.tenant_id = $1 AND f.name = $2 AND (CASE WHEN $3 = '' THEN v.version = f.version ELSE v.sha256 = $3 END)
		LIMIT 1`, tenantID, name, sha).Scan(&module)
	if errors.Is(err, pgx.ErrNoRows) {
		if sha != "" {
			return nil, notFound("function version")
		}
		return nil, notFound("function")
	}
	return module, constraintError(err, "function module", nil)
}

// DeleteFunction removes the function unless a route runs it.
func (db *DB) DeleteFunction(ctx context.Context, tenantID, name string) error {
	if !parseID(tenantID) || tenants.ValidateFunctionName(name) != nil {
		return notFound("function")
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return deleteFunction(ctx, tx, tenantID, name) })
	return constraintError(err, "delete function", nil)
}

// deleteFunction is DeleteFunction's work in tx. It drops the tenant's modules no version
// names any more; the object store keeps its copy until a sweep finds no tenant names it.
func deleteFunction(ctx context.Context, tx pgx.Tx, tenantID, name string) error {
	err := tx.QueryRow(ctx, `SELECT name FROM functions WHERE tenant_id = $1 AND name = $2 FOR UPDATE`, tenantID, name).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("function")
	}
	if err != nil {
		return err
	}
	uses, err := functionUses(ctx, tx, nil, tenantID, name)
	if err != nil {
		return err
	}
	if len(uses) > 0 {
		var ids []string
		for _, u := range uses {
			if !slices.Contains(ids, u.routeID) {
				ids = append(ids, u.routeID)
			}
		}
		return &tenants.Error{Code: tenants.EConflict, Field: "name",
			Message: fmt.Sprintf("function %q is used by route(s) %s; remove it from them first", name, strings.Join(ids, ", "))}
	}
	tag, err := tx.Exec(ctx, `DELETE FROM functions WHERE tenant_id = $1 AND name = $2`, tenantID, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		uncount(ctx, tx, tenantID, tenants.ResFunctions)
	}
	_, err = tx.Exec(ctx, `DELETE FROM function_modules m WHERE m.tenant_id = $1
		AND NOT EXISTS (SELECT 1 FROM function_versions v WHERE v.tenant_id = m.tenant_id AND v.sha256 = m.sha256)`, tenantID)
	return err
}

// configFunction is a function as config as code sees it: name and current digest.
type configFunction struct{ name, sha string }

// queueConfigFunctions queues in b the query of the tenant's functions and their
// current digests, by name, which fills dst.
func queueConfigFunctions(b *pgx.Batch, dst *[]configFunction, tenantID string) {
	b.Queue(`SELECT f.name, v.sha256 FROM functions f
		JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name AND v.version = f.version
		WHERE f.tenant_id = $1 ORDER BY f.name`, tenantID).Query(func(rows pgx.Rows) error {
		var f configFunction
		_, err := pgx.ForEachRow(rows, []any{&f.name, &f.sha}, func() error {
			*dst = append(*dst, f)
			return nil
		})
		return err
	})
}

// setCurrentFunction makes the latest version of name with digest sha current:
// EValidation when the tenant never uploaded that module under that name.
func setCurrentFunction(ctx context.Context, tx pgx.Tx, tenantID, name, sha string) error {
	tag, err := tx.Exec(ctx, `UPDATE functions f SET version = v.version, updated_at = now()
		FROM (SELECT max(version) AS version FROM function_versions WHERE tenant_id = $1 AND name = $2 AND sha256 = $3) v
		WHERE f.tenant_id = $1 AND f.name = $2 AND v.version IS NOT NULL`, tenantID, name, sha)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return tenants.Invalid("sha256", "the tenant never uploaded a module with sha256 %s as function %q: upload it (PUT /v1/tenants/{slug}/functions/%s)", sha, name, name)
	}
	return nil
}

// FunctionDigests returns up to limit distinct digests of every tenant's modules after
// after, in order.
func (db *DB) FunctionDigests(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT sha256 FROM function_modules WHERE sha256 > $1 ORDER BY sha256 LIMIT $2`, after, limit)
	if err != nil {
		return nil, constraintError(err, "function digests", nil)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return list, constraintError(err, "function digests", nil)
}

// ModuleByDigest returns a module of any tenant by its digest: ENotFound.
func (db *DB) ModuleByDigest(ctx context.Context, sha string) ([]byte, error) {
	if !tenants.ValidDigest(sha) {
		return nil, notFound("module")
	}
	var module []byte
	err := db.pool.QueryRow(ctx, `SELECT module FROM function_modules WHERE sha256 = $1 LIMIT 1`, sha).Scan(&module)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("module")
	}
	return module, constraintError(err, "module by digest", nil)
}

// moduleLockClass is the first key of the modules' advisory locks (the two-key lock space,
// apart from the single-key ids in postgres.go); the second is moduleLockKey.
const moduleLockClass int32 = 0x546f6c6c

// moduleLockKey is sha's advisory lock key: its first 32 bits. Two digests that share
// them only wait for each other.
func moduleLockKey(sha string) int32 {
	var k uint32
	for i := 0; i < 8 && i < len(sha); i++ {
		c := sha[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c = 0
		}
		k = k<<4 | uint32(c)
	}
	return int32(k)
}

// unusedModulesQuery keeps those of $1 that no tenant's function module (every version
// has one) and no route names.
const unusedModulesQuery = `SELECT s FROM unnest($1::text[]) s
	WHERE NOT EXISTS (SELECT 1 FROM function_modules m WHERE m.sha256 = s)
	AND NOT EXISTS (SELECT 1 FROM routes r,
		jsonb_array_elements(CASE jsonb_typeof(r.spec->'functions') WHEN 'array' THEN r.spec->'functions' ELSE '[]' END) f
		WHERE f->>'sha256' = s)
	ORDER BY s`

// UnusedModules returns those of digests that no tenant's function version or route
// names (see functionstore.Referrers).
func (db *DB) UnusedModules(ctx context.Context, digests []string) ([]string, error) {
	if len(digests) == 0 {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, unusedModulesQuery, digests)
	if err != nil {
		return nil, constraintError(err, "unused modules", nil)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return list, constraintError(err, "unused modules", nil)
}

// DropModule calls drop when nothing names sha, holding sha's module lock exclusively so
// that no upload of the same bytes commits until drop has returned (see
// functionstore.Referrers).
func (db *DB) DropModule(ctx context.Context, sha string, drop func(context.Context) error) (bool, error) {
	if !tenants.ValidDigest(sha) {
		return false, nil
	}
	dropped := false
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, moduleLockClass, moduleLockKey(sha)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, unusedModulesQuery, []string{sha})
		if err != nil {
			return err
		}
		unused, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(unused) == 0 {
			return err
		}
		if err := drop(ctx); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	if err != nil {
		return false, constraintError(err, "drop module", nil)
	}
	return dropped, nil
}

// resolveFunctions checks that each function r names is the tenant's, and fills the
// digest of the current version where r gives none. It holds the function rows shared
// until the transaction ends.
func resolveFunctions(ctx context.Context, tx pgx.Tx, r *tenants.Route) error {
	for i := range r.Functions {
		f := &r.Functions[i]
		if f.SHA256 == "" {
			err := tx.QueryRow(ctx, `SELECT v.sha256 FROM functions f
				JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name AND v.version = f.version
				WHERE f.tenant_id = $1 AND f.name = $2 FOR SHARE OF f`, r.TenantID, f.Name).Scan(&f.SHA256)
			if errors.Is(err, pgx.ErrNoRows) {
				return tenants.Invalid(fmt.Sprintf("functions[%d].name", i), "the tenant has no function named %q (upload it with PUT /v1/tenants/{slug}/functions/%s)", f.Name, f.Name)
			}
			if err != nil {
				return err
			}
			continue
		}
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM functions f
			JOIN function_versions v ON v.tenant_id = f.tenant_id AND v.name = f.name
			WHERE f.tenant_id = $1 AND f.name = $2 AND v.sha256 = $3 LIMIT 1 FOR SHARE OF f`, r.TenantID, f.Name, f.SHA256).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return tenants.Invalid(fmt.Sprintf("functions[%d].sha256", i), "function %q has no version with sha256 %s", f.Name, f.SHA256)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var _ tenants.FunctionService = (*DB)(nil)
