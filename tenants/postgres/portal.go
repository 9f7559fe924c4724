package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Developer portals: settings, the imported API document, accounts, sessions and mailed
// tokens. None of it is config the edges read, so nothing here goes through the outbox;
// a portal account's consumer and keys are written through the consumer methods, which
// do.

const settingsColumns = `s.tenant_id::text, s.enabled, s.display_name, s.logo, s.primary_color, s.accent_color,
	COALESCE(s.domain_id::text, ''), COALESCE(d.hostname, ''), s.updated_at`

// FindPortal returns the tenant's settings, the zero ones when it saved none.
func (db *DB) FindPortal(ctx context.Context, tenantID string) (*tenants.PortalSettings, error) {
	if !parseID(tenantID) {
		return nil, notFound("tenant")
	}
	var s tenants.PortalSettings
	err := db.pool.QueryRow(ctx, `SELECT `+settingsColumns+` FROM portal_settings s
		LEFT JOIN domains d ON d.tenant_id = s.tenant_id AND d.id = s.domain_id
		WHERE s.tenant_id = $1`, tenantID).Scan(&s.TenantID, &s.Enabled, &s.DisplayName, &s.Logo,
		&s.PrimaryColor, &s.AccentColor, &s.DomainID, &s.Hostname, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return &tenants.PortalSettings{TenantID: tenantID}, nil
	}
	if err != nil {
		return nil, constraintError(err, "find portal", nil)
	}
	s.UpdatedAt = utc(s.UpdatedAt)
	return &s, nil
}

// PutPortal validates and stores s: EValidation (also for a domain that is not one of
// the tenant's verified ones), ENotFound (tenant).
func (db *DB) PutPortal(ctx context.Context, s *tenants.PortalSettings) error {
	if !parseID(s.TenantID) {
		return notFound("tenant")
	}
	if err := s.Validate(); err != nil {
		return err
	}
	var domain *string
	if s.DomainID != "" {
		if !parseID(s.DomainID) {
			return tenants.Invalid("domain_id", "must be one of the tenant's verified domains")
		}
		domain = &s.DomainID
	}
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		if domain != nil {
			var ok bool
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM domains WHERE tenant_id = $1 AND id = $2 AND status = 'verified')`,
				s.TenantID, *domain).Scan(&ok)
			if err != nil {
				return err
			}
			if !ok {
				return tenants.Invalid("domain_id", "must be one of the tenant's verified domains")
			}
		}
		before, err := stateBefore(ctx, tx, scanPortalView, `SELECT enabled, display_name, logo, primary_color, accent_color, coalesce(domain_id::text, '')
			FROM portal_settings WHERE tenant_id = $1`, s.TenantID)
		if err != nil {
			return err
		}
		if before == nil {
			before = &portalView{}
		}
		auditUpdate(tx, before, &portalView{s.Enabled, s.DisplayName, s.Logo, strings.ToLower(s.PrimaryColor), strings.ToLower(s.AccentColor), s.DomainID})
		_, err = tx.Exec(ctx, `INSERT INTO portal_settings (tenant_id, enabled, display_name, logo, primary_color, accent_color, domain_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (tenant_id) DO UPDATE SET enabled = $2, display_name = $3, logo = $4, primary_color = $5,
				accent_color = $6, domain_id = $7, updated_at = now()`,
			s.TenantID, s.Enabled, s.DisplayName, s.Logo, strings.ToLower(s.PrimaryColor), strings.ToLower(s.AccentColor), domain)
		if err == nil {
			auditObject(tx, s.TenantID, "")
		}
		return err
	})
	if err != nil {
		return constraintError(err, "put portal", nil)
	}
	saved, err := db.FindPortal(ctx, s.TenantID)
	if err != nil {
		return err
	}
	*s = *saved
	return nil
}

// portalView is what a tenant sets of its portal, named as the audit log shows it.
type portalView struct {
	Enabled      bool   `json:"enabled"`
	DisplayName  string `json:"display_name"`
	Logo         string `json:"logo"`
	PrimaryColor string `json:"primary_color"`
	AccentColor  string `json:"accent_color"`
	DomainID     string `json:"domain_id"`
}

func scanPortalView(row pgx.Row) (*portalView, error) {
	var v portalView
	err := row.Scan(&v.Enabled, &v.DisplayName, &v.Logo, &v.PrimaryColor, &v.AccentColor, &v.DomainID)
	return &v, err
}

// PortalHosts maps the host names of enabled portals on verified domains to their
// tenants' slugs.
func (db *DB) PortalHosts(ctx context.Context) (map[string]string, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT d.hostname, t.slug FROM portal_settings s
		JOIN domains d ON d.tenant_id = s.tenant_id AND d.id = s.domain_id AND d.status = 'verified'
		JOIN tenants t ON t.id = s.tenant_id
		WHERE s.enabled`)
	if err != nil {
		return nil, constraintError(err, "portal hosts", nil)
	}
	hosts := map[string]string{}
	for rows.Next() {
		var h, slug string
		if err := rows.Scan(&h, &slug); err != nil {
			return nil, constraintError(err, "portal hosts", nil)
		}
		hosts[strings.ToLower(h)] = slug
	}
	return hosts, constraintError(rows.Err(), "portal hosts", nil)
}

// SaveAPIDoc replaces the tenant's OpenAPI document: EValidation (too large), ENotFound.
func (db *DB) SaveAPIDoc(ctx context.Context, tenantID string, doc []byte) error {
	if !parseID(tenantID) {
		return notFound("tenant")
	}
	if len(doc) > tenants.MaxAPIDocBytes {
		return tenants.Invalid("openapi", "must be at most %d MiB", tenants.MaxAPIDocBytes>>20)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO api_docs (tenant_id, document) VALUES ($1, $2)
		ON CONFLICT (tenant_id) DO UPDATE SET document = $2, updated_at = now()`, tenantID, doc)
	return constraintError(err, "save api doc", nil)
}

// FindAPIDoc: ENotFound when the tenant imported none.
func (db *DB) FindAPIDoc(ctx context.Context, tenantID string) ([]byte, error) {
	if !parseID(tenantID) {
		return nil, notFound("document")
	}
	var doc []byte
	err := db.pool.QueryRow(ctx, `SELECT document FROM api_docs WHERE tenant_id = $1`, tenantID).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("document")
	}
	return doc, constraintError(err, "find api doc", nil)
}

const accountColumns = `tenant_id::text, id::text, email, password_hash, email_verified, COALESCE(consumer_id::text, ''), created_at`

func scanAccount(row pgx.Row) (*tenants.PortalAccount, error) {
	var a tenants.PortalAccount
	err := row.Scan(&a.TenantID, &a.ID, &a.Email, &a.PasswordHash, &a.EmailVerified, &a.ConsumerID, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("account")
	}
	if err != nil {
		return nil, constraintError(err, "portal account", nil)
	}
	a.CreatedAt = utc(a.CreatedAt)
	return &a, nil
}

// CreatePortalAccount stores a with a new id: EValidation, EConflict (the address has an
// account at this tenant), ENotFound (tenant).
func (db *DB) CreatePortalAccount(ctx context.Context, a *tenants.PortalAccount) error {
	if !parseID(a.TenantID) {
		return notFound("tenant")
	}
	email, err := tenants.NormalizeEmail(a.Email)
	if err != nil {
		return err
	}
	if a.PasswordHash == "" {
		return tenants.Invalid("password", "is required")
	}
	saved, err := scanAccount(db.pool.QueryRow(ctx, `INSERT INTO portal_accounts (tenant_id, id, email, password_hash)
		VALUES ($1, $2, $3, $4) RETURNING `+accountColumns, a.TenantID, newID(), email, a.PasswordHash))
	if err != nil {
		return constraintError(err, "create portal account", map[string]*tenants.Error{
			"portal_accounts_email_key": {Code: tenants.EConflict, Field: "email", Message: "this address has an account here"},
		})
	}
	*a = *saved
	return nil
}

// FindPortalAccount: ENotFound.
func (db *DB) FindPortalAccount(ctx context.Context, tenantID, id string) (*tenants.PortalAccount, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("account")
	}
	return scanAccount(db.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM portal_accounts WHERE tenant_id = $1 AND id = $2`, tenantID, id))
}

// FindPortalAccountByEmail: ENotFound.
func (db *DB) FindPortalAccountByEmail(ctx context.Context, tenantID, email string) (*tenants.PortalAccount, error) {
	email, err := tenants.NormalizeEmail(email)
	if err != nil || !parseID(tenantID) {
		return nil, notFound("account")
	}
	return scanAccount(db.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM portal_accounts WHERE tenant_id = $1 AND email = $2`, tenantID, email))
}

// SetPortalConsumer: ENotFound (account, or a consumer of another tenant).
func (db *DB) SetPortalConsumer(ctx context.Context, tenantID, accountID, consumerID string) error {
	if !parseID(tenantID) || !parseID(accountID) || !parseID(consumerID) {
		return notFound("account")
	}
	tag, err := db.pool.Exec(ctx, `UPDATE portal_accounts SET consumer_id = $3 WHERE tenant_id = $1 AND id = $2`, tenantID, accountID, consumerID)
	if err != nil {
		return constraintError(err, "set portal consumer", map[string]*tenants.Error{
			"portal_accounts_consumer_fkey": notFound("consumer"),
		})
	}
	if tag.RowsAffected() == 0 {
		return notFound("account")
	}
	return nil
}

// CreatePortalToken stores a mailed link's token.
func (db *DB) CreatePortalToken(ctx context.Context, t *tenants.PortalToken) error {
	if !parseID(t.TenantID) || !parseID(t.AccountID) {
		return notFound("account")
	}
	if !validHash(t.Hash) {
		return tenants.Invalid("hash", "must be the hex SHA-256 of the token")
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO portal_tokens (hash, tenant_id, account_id, purpose, expires_at)
		VALUES ($1, $2, $3, $4, $5)`, t.Hash, t.TenantID, t.AccountID, t.Purpose, t.ExpiresAt)
	return constraintError(err, "create portal token", map[string]*tenants.Error{
		"portal_tokens_account_fkey": notFound("account"),
	})
}

// spendPortal marks a live token of purpose used, in the statement that checks it, and
// returns its account's id.
func spendPortal(ctx context.Context, tx pgx.Tx, tenantID, hash, purpose string) (string, error) {
	var id string
	err := tx.QueryRow(ctx, `UPDATE portal_tokens SET used_at = now()
		WHERE hash = $1 AND tenant_id = $2 AND purpose = $3 AND used_at IS NULL AND expires_at > now()
		RETURNING account_id::text`, hash, tenantID, purpose).Scan(&id)
	return id, err
}

// VerifyPortalEmail: ENotFound.
func (db *DB) VerifyPortalEmail(ctx context.Context, tenantID, hash string) (*tenants.PortalAccount, error) {
	if !parseID(tenantID) || !validHash(hash) {
		return nil, notFound("link")
	}
	var a *tenants.PortalAccount
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		id, err := spendPortal(ctx, tx, tenantID, hash, tenants.TokenVerify)
		if err != nil {
			return err
		}
		a, err = scanAccount(tx.QueryRow(ctx, `UPDATE portal_accounts SET email_verified = true
			WHERE tenant_id = $1 AND id = $2 RETURNING `+accountColumns, tenantID, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("link")
	}
	return a, constraintError(err, "verify portal email", nil)
}

// ResetPortalPassword: ENotFound, EValidation.
func (db *DB) ResetPortalPassword(ctx context.Context, tenantID, hash, passwordHash string) (*tenants.PortalAccount, error) {
	if passwordHash == "" {
		return nil, tenants.Invalid("password", "is required")
	}
	if !parseID(tenantID) || !validHash(hash) {
		return nil, notFound("link")
	}
	var a *tenants.PortalAccount
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		id, err := spendPortal(ctx, tx, tenantID, hash, tenants.TokenReset)
		if err != nil {
			return err
		}
		// Following the mailed link proves the address as well.
		a, err = scanAccount(tx.QueryRow(ctx, `UPDATE portal_accounts SET password_hash = $3, email_verified = true
			WHERE tenant_id = $1 AND id = $2 RETURNING `+accountColumns, tenantID, id, passwordHash))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM portal_sessions WHERE tenant_id = $1 AND account_id = $2`, tenantID, id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("link")
	}
	return a, constraintError(err, "reset portal password", nil)
}

// CreatePortalSession stores s, and drops the expired sessions of its account.
func (db *DB) CreatePortalSession(ctx context.Context, s *tenants.PortalSession) error {
	if !parseID(s.TenantID) || !parseID(s.AccountID) {
		return notFound("account")
	}
	if !validHash(s.Hash) {
		return tenants.Invalid("hash", "must be the hex SHA-256 of the cookie")
	}
	return constraintError(pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM portal_sessions WHERE tenant_id = $1 AND account_id = $2 AND expires_at <= now()`,
			s.TenantID, s.AccountID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO portal_sessions (hash, tenant_id, account_id, csrf, expires_at) VALUES ($1, $2, $3, $4, $5)`,
			s.Hash, s.TenantID, s.AccountID, s.CSRF, s.ExpiresAt)
		return err
	}), "create portal session", map[string]*tenants.Error{"portal_sessions_account_fkey": notFound("account")})
}

// FindPortalSession: ENotFound (unknown, expired, or another tenant's).
func (db *DB) FindPortalSession(ctx context.Context, tenantID, hash string) (*tenants.PortalSession, error) {
	if !parseID(tenantID) || !validHash(hash) {
		return nil, notFound("session")
	}
	var s tenants.PortalSession
	err := db.pool.QueryRow(ctx, `SELECT hash, tenant_id::text, account_id::text, csrf, expires_at FROM portal_sessions
		WHERE hash = $1 AND tenant_id = $2 AND expires_at > now()`, hash, tenantID).Scan(&s.Hash, &s.TenantID, &s.AccountID, &s.CSRF, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, constraintError(err, "find portal session", nil)
	}
	s.ExpiresAt = utc(s.ExpiresAt)
	return &s, nil
}

// DeletePortalSession forgets the session; an unknown one is no error.
func (db *DB) DeletePortalSession(ctx context.Context, tenantID, hash string) error {
	if !parseID(tenantID) {
		return nil
	}
	_, err := db.pool.Exec(ctx, `DELETE FROM portal_sessions WHERE hash = $1 AND tenant_id = $2`, hash, tenantID)
	return constraintError(err, "delete portal session", nil)
}

// SetPortalFlash keeps sealed for the session's next page: ENotFound.
func (db *DB) SetPortalFlash(ctx context.Context, tenantID, hash, sealed string) error {
	if !parseID(tenantID) {
		return notFound("session")
	}
	tag, err := db.pool.Exec(ctx, `UPDATE portal_sessions SET flash = $3 WHERE hash = $1 AND tenant_id = $2`, hash, tenantID, sealed)
	if err != nil {
		return constraintError(err, "set portal flash", nil)
	}
	if tag.RowsAffected() == 0 {
		return notFound("session")
	}
	return nil
}

// TakePortalFlash returns the session's flash and clears it in the same statement, so
// it is shown once even to two pages loading together.
func (db *DB) TakePortalFlash(ctx context.Context, tenantID, hash string) (string, error) {
	if !parseID(tenantID) {
		return "", nil
	}
	var flash string
	err := db.pool.QueryRow(ctx, `UPDATE portal_sessions s SET flash = '' FROM portal_sessions old
		WHERE s.hash = $1 AND s.tenant_id = $2 AND old.hash = s.hash AND s.flash <> ''
		RETURNING old.flash`, hash, tenantID).Scan(&flash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return flash, constraintError(err, "take portal flash", nil)
}

var _ tenants.PortalService = (*DB)(nil)
