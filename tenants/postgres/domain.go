package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

const domainColumns = `tenant_id::text, id::text, hostname, certificate_pem, private_key_pem, not_after, version, created_at, updated_at`

func scanDomain(row pgx.Row) (*tenants.Domain, error) {
	var d tenants.Domain
	if err := row.Scan(&d.TenantID, &d.ID, &d.Hostname, &d.CertificatePEM, &d.PrivateKeyPEM, &d.NotAfter,
		&d.Version, &d.CreatedAt, &d.UpdatedAt); err != nil {
		return nil, err
	}
	d.NotAfter, d.CreatedAt, d.UpdatedAt = utc(d.NotAfter), utc(d.CreatedAt), utc(d.UpdatedAt)
	return &d, nil
}

func domainChange(d *tenants.Domain) change {
	c := *d
	return put(d.TenantID, tenants.ObjectKey(d.TenantID, tenants.KindDomain, d.ID), &tenants.Entry{Domain: &c})
}

func domainConflicts(d *tenants.Domain) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"domains_hostname_key": {Code: tenants.EConflict, Field: "hostname", Message: fmt.Sprintf("the host name %q is taken", d.Hostname)},
	}
}

// CreateDomain validates d (without the edge-domain rule, which the api applies: the
// store does not know the edge domain), stores it with a new id and version 1, and fills
// in d. EValidation, EConflict (host name taken by any tenant), ENotFound (tenant).
func (db *DB) CreateDomain(ctx context.Context, d *tenants.Domain) error {
	if !parseID(d.TenantID) {
		return notFound("tenant")
	}
	if err := d.Validate("", time.Now()); err != nil {
		return err
	}
	id := newID()
	err := db.write(ctx, func(tx pgx.Tx) error {
		var tid string
		err := tx.QueryRow(ctx, `SELECT id::text FROM tenants WHERE id = $1 FOR NO KEY UPDATE`, d.TenantID).Scan(&tid)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("tenant")
		}
		if err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM domains WHERE tenant_id = $1`, tid).Scan(&n); err != nil {
			return err
		}
		if n >= tenants.MaxDomainsPerTenant {
			return tenants.Invalid("hostname", "the tenant has %d domains, the most it may have", n)
		}
		saved, err := scanDomain(tx.QueryRow(ctx, `INSERT INTO domains (tenant_id, id, hostname, certificate_pem, private_key_pem, not_after)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+domainColumns,
			tid, id, d.Hostname, d.CertificatePEM, d.PrivateKeyPEM, d.NotAfter))
		if err != nil {
			return err
		}
		*d = *saved
		return emit(ctx, tx, domainChange(d))
	})
	return constraintError(err, "create domain", domainConflicts(d))
}

// FindDomain returns the domain with its private key: ENotFound.
func (db *DB) FindDomain(ctx context.Context, tenantID, id string) (*tenants.Domain, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("domain")
	}
	d, err := scanDomain(db.pool.QueryRow(ctx, `SELECT `+domainColumns+` FROM domains WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("domain")
	}
	return d, constraintError(err, "find domain", nil)
}

// ListDomains returns a page of the tenant's domains in creation order and the cursor of
// the next page ("" after the last).
func (db *DB) ListDomains(ctx context.Context, tenantID string, pg tenants.Page) ([]*tenants.Domain, string, error) {
	limit, cursor, err := page(pg)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.Domain{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+domainColumns+` FROM domains
		WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list domains", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Domain, error) { return scanDomain(r) })
	if err != nil {
		return nil, "", constraintError(err, "list domains", nil)
	}
	list, next := nextCursor(list, limit, func(d *tenants.Domain) string { return d.ID })
	return list, next, nil
}

// UpdateDomain replaces the domain's host name, certificate and key when d.Version is
// current, and fills in d. ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdateDomain(ctx context.Context, d *tenants.Domain) error {
	if !parseID(d.TenantID) || !parseID(d.ID) {
		return notFound("domain")
	}
	if err := d.Validate("", time.Now()); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		saved, err := scanDomain(tx.QueryRow(ctx, `UPDATE domains SET hostname = $4, certificate_pem = $5, private_key_pem = $6,
			not_after = $7, version = version + 1, updated_at = now()
			WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+domainColumns,
			d.TenantID, d.ID, d.Version, d.Hostname, d.CertificatePEM, d.PrivateKeyPEM, d.NotAfter))
		if errors.Is(err, pgx.ErrNoRows) {
			return versionOrNotFound(ctx, tx, "domain", `SELECT version FROM domains WHERE tenant_id = $1 AND id = $2`, d.Version, d.TenantID, d.ID)
		}
		if err != nil {
			return err
		}
		*d = *saved
		return emit(ctx, tx, domainChange(d))
	})
	return constraintError(err, "update domain", domainConflicts(d))
}

// DeleteDomain: ENotFound.
func (db *DB) DeleteDomain(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("domain")
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		var tid, did string
		err := tx.QueryRow(ctx, `DELETE FROM domains WHERE tenant_id = $1 AND id = $2
			RETURNING tenant_id::text, id::text`, tenantID, id).Scan(&tid, &did)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("domain")
		}
		if err != nil {
			return err
		}
		return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindDomain, did)))
	})
	return constraintError(err, "delete domain", nil)
}

var _ tenants.DomainService = (*DB)(nil)
