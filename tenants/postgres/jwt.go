package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/jsonspec"
)

// The spec holds the HS256 secret, which the edges need to verify with; only the api
// keeps it from clients. It comes first, so the columns of their own fill in the rest.
const issuerColumns = `spec, tenant_id::text, id::text, issuer, version, created_at, updated_at`

func scanIssuer(row pgx.Row) (*tenants.Issuer, error) {
	var is tenants.Issuer
	if err := row.Scan(&is, &is.TenantID, &is.ID, &is.Issuer, &is.Version, &is.CreatedAt, &is.UpdatedAt); err != nil {
		return nil, err
	}
	is.CreatedAt, is.UpdatedAt = utc(is.CreatedAt), utc(is.UpdatedAt)
	return &is, nil
}

func issuerChange(is *tenants.Issuer) change {
	c := *is
	return put(is.TenantID, tenants.ObjectKey(is.TenantID, tenants.KindJWTIssuer, is.ID), &tenants.Entry{JWTIssuer: &c})
}

func issuerConflicts(is *tenants.Issuer) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"jwt_issuers_issuer_key": {Code: tenants.EConflict, Field: "issuer", Message: fmt.Sprintf("the tenant already has issuer %q", is.Issuer)},
	}
}

// validateIssuer applies the issuer rules and the upstream policy to a jwks_url host.
func (db *DB) validateIssuer(is *tenants.Issuer) error {
	if err := is.Validate(); err != nil {
		return err
	}
	return is.CheckJWKSHost(db.upstream)
}

// CreateJWTIssuer validates is, stores it with a new id and version 1, and fills in is.
// EValidation (also past the platform plan's jwt_issuers), EConflict (issuer taken),
// ENotFound (tenant).
func (db *DB) CreateJWTIssuer(ctx context.Context, is *tenants.Issuer) error {
	if !parseID(is.TenantID) {
		return notFound("tenant")
	}
	if err := db.validateIssuer(is); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return insertIssuer(ctx, tx, is) })
	return constraintError(err, "create jwt issuer", issuerConflicts(is))
}

// insertIssuer is CreateJWTIssuer's work in tx, on a validated is.
func insertIssuer(ctx context.Context, tx pgx.Tx, is *tenants.Issuer) error {
	if err := checkCount(ctx, tx, is.TenantID, tenants.ResJWTIssuers); err != nil {
		return err
	}
	saved, err := scanIssuer(tx.QueryRow(ctx, `INSERT INTO jwt_issuers (tenant_id, id, issuer, spec) VALUES ($1, $2, $3, $4)
		RETURNING `+issuerColumns, is.TenantID, newID(), is.Issuer, jsonspec.Of(is, "issuer")))
	if err != nil {
		return err
	}
	*is = *saved
	return emit(ctx, tx, issuerChange(is))
}

// FindJWTIssuer returns the issuer with its HS256 secret: ENotFound.
func (db *DB) FindJWTIssuer(ctx context.Context, tenantID, id string) (*tenants.Issuer, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("jwt issuer")
	}
	is, err := scanIssuer(db.pool.QueryRow(ctx, `SELECT `+issuerColumns+` FROM jwt_issuers WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("jwt issuer")
	}
	return is, constraintError(err, "find jwt issuer", nil)
}

// ListJWTIssuers returns a page of the tenant's issuers in creation order and the cursor
// of the next page ("" after the last).
func (db *DB) ListJWTIssuers(ctx context.Context, tenantID string, p tenants.Page) ([]*tenants.Issuer, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.Issuer{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+issuerColumns+` FROM jwt_issuers
		WHERE tenant_id = $1 AND id > $2 ORDER BY jwt_issuers.id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list jwt issuers", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Issuer, error) { return scanIssuer(r) })
	if err != nil {
		return nil, "", constraintError(err, "list jwt issuers", nil)
	}
	list, next := nextCursor(list, limit, func(is *tenants.Issuer) string { return is.ID })
	return list, next, nil
}

// UpdateJWTIssuer replaces the issuer when is.Version is current and fills in is. When
// is names no key source, a stored HS256 secret is kept (clients cannot read it back to
// resend it). ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdateJWTIssuer(ctx context.Context, is *tenants.Issuer) error {
	if !parseID(is.TenantID) || !parseID(is.ID) {
		return notFound("jwt issuer")
	}
	keepSecret := is.JWKSURL == "" && is.Keys == nil && is.HS256Secret == ""
	if !keepSecret {
		if err := db.validateIssuer(is); err != nil {
			return err
		}
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		if keepSecret {
			cur, err := scanIssuer(tx.QueryRow(ctx, `SELECT `+issuerColumns+` FROM jwt_issuers
				WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, is.TenantID, is.ID))
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("jwt issuer")
			}
			if err != nil {
				return err
			}
			is.HS256Secret = cur.HS256Secret
			if err := db.validateIssuer(is); err != nil {
				return err
			}
		}
		return updateIssuer(ctx, tx, is)
	})
	return constraintError(err, "update jwt issuer", issuerConflicts(is))
}

// updateIssuer stores a validated is, secret included, in tx.
func updateIssuer(ctx context.Context, tx pgx.Tx, is *tenants.Issuer) error {
	before, err := stateBefore(ctx, tx, scanIssuer, `SELECT `+issuerColumns+` FROM jwt_issuers WHERE tenant_id = $1 AND id = $2`, is.TenantID, is.ID)
	if err != nil {
		return err
	}
	saved, err := scanIssuer(tx.QueryRow(ctx, `UPDATE jwt_issuers SET issuer = $4, spec = $5, version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+issuerColumns,
		is.TenantID, is.ID, is.Version, is.Issuer, jsonspec.Of(is, "issuer")))
	if errors.Is(err, pgx.ErrNoRows) {
		return versionOrNotFound(ctx, tx, "jwt issuer", `SELECT version FROM jwt_issuers WHERE tenant_id = $1 AND id = $2`, is.Version, is.TenantID, is.ID)
	}
	if err != nil {
		return err
	}
	*is = *saved
	auditUpdate(tx, before, is)
	return emit(ctx, tx, issuerChange(is))
}

// DeleteJWTIssuer: ENotFound.
func (db *DB) DeleteJWTIssuer(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("jwt issuer")
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return deleteIssuer(ctx, tx, tenantID, id) })
	return constraintError(err, "delete jwt issuer", nil)
}

// deleteIssuer is DeleteJWTIssuer's work in tx.
func deleteIssuer(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	// The ids as stored, not as sent, build the key.
	var tid, iid string
	err := tx.QueryRow(ctx, `DELETE FROM jwt_issuers WHERE tenant_id = $1 AND id = $2
		RETURNING tenant_id::text, id::text`, tenantID, id).Scan(&tid, &iid)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("jwt issuer")
	}
	if err != nil {
		return err
	}
	uncount(ctx, tx, tid, tenants.ResJWTIssuers)
	return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindJWTIssuer, iid)))
}

var _ tenants.JWTIssuerService = (*DB)(nil)
