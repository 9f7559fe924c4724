package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tollgate/tenants"
)

// Users, memberships and sessions are the api's own data, like tokens: they are not config
// entries and go through no outbox. Membership and audit queries are always scoped by the
// tenant id (and a session by its hash), so one tenant's people never show in another's.

const userColumns = `id::text, email, password_hash, platform_role, email_verified_at IS NOT NULL, created_at`

func scanUser(row pgx.Row) (*tenants.User, error) {
	var u tenants.User
	if err := row.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.PlatformRole, &u.EmailVerified, &u.CreatedAt); err != nil {
		return nil, err
	}
	u.CreatedAt = utc(u.CreatedAt)
	return &u, nil
}

// signUpAlone creates a user of no tenant: someone who holds a platform role (finance)
// or joins tenants by invitation only. Its address is unverified: a platform role granted
// to it applies once it is proven.
func (db *DB) signUpAlone(ctx context.Context, u *tenants.User, email string) error {
	saved, err := scanUser(db.pool.QueryRow(ctx, `INSERT INTO users (id, email, password_hash) VALUES ($1, $2, $3)
		RETURNING `+userColumns, newID(), email, u.PasswordHash))
	if err != nil {
		return constraintError(err, "sign up", map[string]*tenants.Error{
			"users_email_key": {Code: tenants.EConflict, Field: "email", Message: "an account with this email exists: sign in instead"},
		})
	}
	*u = *saved
	return nil
}

// SignUp creates u, tenant t and u's owner membership of t in one transaction, so a
// sign-up that fails leaves neither a user without a tenant nor a tenant without an owner;
// a nil t asks for the user alone (signUpAlone).
func (db *DB) SignUp(ctx context.Context, u *tenants.User, t *tenants.Tenant) error {
	email, err := tenants.NormalizeEmail(u.Email)
	if err != nil {
		return err
	}
	if u.PasswordHash == "" {
		return tenants.Invalid("password", "is required")
	}
	if t == nil {
		return db.signUpAlone(ctx, u, email)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	uid, tid := newID(), newID()
	err = db.write(ctx, func(tx pgx.Tx) error {
		saved, err := scanUser(tx.QueryRow(ctx, `INSERT INTO users (id, email, password_hash) VALUES ($1, $2, $3)
			RETURNING `+userColumns, uid, email, u.PasswordHash))
		if err != nil {
			return err
		}
		if err := lockPlatformPlan(ctx, tx, t.PlatformPlan); err != nil {
			return err
		}
		cell, err := db.placement(ctx, tx, "")
		if err != nil {
			return err
		}
		st, err := scanTenant(tx.QueryRow(ctx, `INSERT INTO tenants (id, slug, name, plan, cell) VALUES ($1, $2, $3, $4, $5)
			RETURNING `+tenantColumns, tid, t.Slug, t.Name, t.PlatformPlan, cell))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, 'owner')`, st.ID, saved.ID); err != nil {
			return err
		}
		*u, *t = *saved, *st
		auditObject(tx, t.ID, t.ID) // a tenant's creation names it, unlike its other changes
		return emit(ctx, tx, tenantChange(t))
	})
	return constraintError(err, "sign up", map[string]*tenants.Error{
		"users_email_key":   {Code: tenants.EConflict, Field: "email", Message: "an account with this email exists: sign in instead"},
		"tenants_slug_key":  {Code: tenants.EConflict, Field: "slug", Message: `slug "` + t.Slug + `" is taken`},
		"tenants_plan_fkey": noPlatformPlan(t.PlatformPlan),
	})
}

// CreateOwnedTenant creates t and userID's owner membership in it. The tenant starts on the
// default platform plan unless t names one.
func (db *DB) CreateOwnedTenant(ctx context.Context, userID string, t *tenants.Tenant) error {
	if !parseID(userID) {
		return notFound("user")
	}
	if err := t.Validate(); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		if err := lockPlatformPlan(ctx, tx, t.PlatformPlan); err != nil {
			return err
		}
		cell, err := db.placement(ctx, tx, "")
		if err != nil {
			return err
		}
		st, err := scanTenant(tx.QueryRow(ctx, `INSERT INTO tenants (id, slug, name, plan, cell) VALUES ($1, $2, $3, $4, $5)
			RETURNING `+tenantColumns, newID(), t.Slug, t.Name, t.PlatformPlan, cell))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, 'owner')`, st.ID, userID); err != nil {
			return err
		}
		*t = *st
		auditObject(tx, t.ID, t.ID)
		return emit(ctx, tx, tenantChange(t))
	})
	return constraintError(err, "create tenant", map[string]*tenants.Error{
		"tenants_slug_key":      {Code: tenants.EConflict, Field: "slug", Message: `slug "` + t.Slug + `" is taken`},
		"tenants_plan_fkey":     noPlatformPlan(t.PlatformPlan),
		"memberships_user_fkey": notFound("user"),
	})
}

// FindUserByEmail: ENotFound.
func (db *DB) FindUserByEmail(ctx context.Context, email string) (*tenants.User, error) {
	email, err := tenants.NormalizeEmail(email)
	if err != nil {
		return nil, notFound("user")
	}
	u, err := scanUser(db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE email = $1`, email))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("user")
	}
	return u, constraintError(err, "find user", nil)
}

// FindUser: ENotFound.
func (db *DB) FindUser(ctx context.Context, id string) (*tenants.User, error) {
	if !parseID(id) {
		return nil, notFound("user")
	}
	u, err := scanUser(db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("user")
	}
	return u, constraintError(err, "find user", nil)
}

const membershipSelect = `SELECT m.tenant_id::text, t.slug, t.name, m.user_id::text, u.email, m.role, m.created_at
	FROM memberships m JOIN tenants t ON t.id = m.tenant_id JOIN users u ON u.id = m.user_id`

func scanMembership(row pgx.Row) (*tenants.Membership, error) {
	var m tenants.Membership
	if err := row.Scan(&m.TenantID, &m.TenantSlug, &m.TenantName, &m.UserID, &m.Email, &m.Role, &m.CreatedAt); err != nil {
		return nil, err
	}
	m.CreatedAt = utc(m.CreatedAt)
	return &m, nil
}

// FindMembership: ENotFound.
func (db *DB) FindMembership(ctx context.Context, tenantID, userID string) (*tenants.Membership, error) {
	if !parseID(tenantID) || !parseID(userID) {
		return nil, notFound("membership")
	}
	m, err := scanMembership(db.pool.QueryRow(ctx, membershipSelect+` WHERE m.tenant_id = $1 AND m.user_id = $2`, tenantID, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("membership")
	}
	return m, constraintError(err, "find membership", nil)
}

// ListMemberships lists a user's tenants by slug.
func (db *DB) ListMemberships(ctx context.Context, userID string) ([]*tenants.Membership, error) {
	if !parseID(userID) {
		return []*tenants.Membership{}, nil
	}
	return db.memberships(ctx, membershipSelect+` WHERE m.user_id = $1 ORDER BY t.slug LIMIT 500`, userID)
}

// ListMembers lists a tenant's members by email.
func (db *DB) ListMembers(ctx context.Context, tenantID string) ([]*tenants.Membership, error) {
	if !parseID(tenantID) {
		return []*tenants.Membership{}, nil
	}
	return db.memberships(ctx, membershipSelect+` WHERE m.tenant_id = $1 ORDER BY u.email LIMIT 500`, tenantID)
}

func (db *DB) memberships(ctx context.Context, sql, id string) ([]*tenants.Membership, error) {
	rows, err := db.pool.Query(ctx, sql, id)
	if err != nil {
		return nil, constraintError(err, "list memberships", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Membership, error) { return scanMembership(r) })
	return list, constraintError(err, "list memberships", nil)
}

// CreateSession stores s; expired sessions of every user are swept on the way.
func (db *DB) CreateSession(ctx context.Context, s *tenants.Session) error {
	if !validHash(s.Hash) || !parseID(s.UserID) {
		return tenants.Invalid("session", "must have a hash and a user")
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM sessions WHERE expires_at < now()`); err != nil {
		return constraintError(err, "sweep sessions", nil)
	}
	err := db.pool.QueryRow(ctx, `INSERT INTO sessions (hash, user_id, csrf, expires_at) VALUES ($1, $2, $3, $4)
		RETURNING created_at`, s.Hash, s.UserID, s.CSRF, s.ExpiresAt).Scan(&s.CreatedAt)
	return constraintError(err, "create session", nil)
}

// FindSession: ENotFound when there is none or it has expired.
func (db *DB) FindSession(ctx context.Context, hash string) (*tenants.Session, error) {
	if !validHash(hash) {
		return nil, notFound("session")
	}
	var s tenants.Session
	err := db.pool.QueryRow(ctx, `SELECT hash, user_id::text, csrf, expires_at, created_at FROM sessions
		WHERE hash = $1 AND expires_at > now()`, hash).Scan(&s.Hash, &s.UserID, &s.CSRF, &s.ExpiresAt, &s.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, constraintError(err, "find session", nil)
	}
	s.ExpiresAt, s.CreatedAt = utc(s.ExpiresAt), utc(s.CreatedAt)
	return &s, nil
}

// DeleteSession removes a session; a missing one is not an error (logout is idempotent).
func (db *DB) DeleteSession(ctx context.Context, hash string) error {
	_, err := db.pool.Exec(ctx, `DELETE FROM sessions WHERE hash = $1`, hash)
	return constraintError(err, "delete session", nil)
}

// ListAudit returns a page of the tenant's audit log, newest first.
func (db *DB) ListAudit(ctx context.Context, tenantID string, q tenants.AuditQuery) ([]*tenants.AuditEntry, string, error) {
	p := q.Page
	// Audit ids are numbers, not UUIDs: the cursor is read here rather than by page.
	limit, _, err := page(tenants.Page{Limit: p.Limit})
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.AuditEntry{}, "", nil
	}
	before := int64(1<<63 - 1)
	if p.Cursor != "" {
		if before, err = strconv.ParseInt(p.Cursor, 10, 64); err != nil || before <= 0 {
			return nil, "", tenants.Errorf(tenants.EInvalidRequest, "cursor is not one this list returned")
		}
	}
	var from, to *time.Time // nil: open
	if !q.From.IsZero() {
		from = &q.From
	}
	if !q.To.IsZero() {
		to = &q.To
	}
	rows, err := db.pool.Query(ctx, `SELECT id, tenant_id::text, actor, action, object, at, changes FROM audit_log
		WHERE tenant_id = $1 AND id < $2 AND ($4::timestamptz IS NULL OR at >= $4) AND ($5::timestamptz IS NULL OR at < $5)
		ORDER BY id DESC LIMIT $3`, tenantID, before, limit+1, from, to)
	if err != nil {
		return nil, "", constraintError(err, "list audit", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.AuditEntry, error) {
		var e tenants.AuditEntry
		err := r.Scan(&e.ID, &e.TenantID, &e.Actor, &e.Action, &e.Object, &e.At, &e.Changes)
		e.At = utc(e.At)
		return &e, err
	})
	if err != nil {
		return nil, "", constraintError(err, "list audit", nil)
	}
	list, next := nextCursor(list, limit, func(e *tenants.AuditEntry) string { return strconv.FormatInt(e.ID, 10) })
	return list, next, nil
}

var (
	_ tenants.PeopleService = (*DB)(nil)
	_ tenants.AuditService  = (*DB)(nil)
)

// Pool is the store's connection pool, for a store of another domain that shares the
// database (billing's usage reports in the console) without a second pool.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }
