package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

const domainColumns = `tenant_id::text, id::text, hostname, certificate_pem, private_key_pem, not_after,
	status, token, verified_at, checked_at, next_check_at, last_error, failures, pending_since,
	version, created_at, updated_at`

func scanDomain(row pgx.Row) (*tenants.Domain, error) {
	var d tenants.Domain
	var token string
	if err := row.Scan(&d.TenantID, &d.ID, &d.Hostname, &d.CertificatePEM, &d.PrivateKeyPEM, &d.NotAfter,
		&d.Status, &token, &d.VerifiedAt, &d.CheckedAt, &d.NextCheckAt, &d.LastError, &d.Failures, &d.PendingSince,
		&d.Version, &d.CreatedAt, &d.UpdatedAt); err != nil {
		return nil, err
	}
	d.Verification = tenants.NewDomainVerification(d.Hostname, token)
	d.NotAfter, d.CreatedAt, d.UpdatedAt, d.PendingSince = utc(d.NotAfter), utc(d.CreatedAt), utc(d.UpdatedAt), utc(d.PendingSince)
	for _, t := range []*time.Time{d.VerifiedAt, d.CheckedAt, d.NextCheckAt} {
		if t != nil {
			*t = utc(*t)
		}
	}
	return &d, nil
}

// domainEntry is the domain's config entry: what the edges need to serve it (host name,
// status, certificate and key), without the claim's bookkeeping.
func domainEntry(d *tenants.Domain) *tenants.Entry {
	c := *d
	c.Verification, c.VerifiedAt, c.CheckedAt, c.NextCheckAt, c.LastError = nil, nil, nil, nil, ""
	return &tenants.Entry{Domain: &c}
}

func domainChange(d *tenants.Domain) change {
	return put(d.TenantID, tenants.ObjectKey(d.TenantID, tenants.KindDomain, d.ID), domainEntry(d))
}

func domainConflicts(d *tenants.Domain) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"domains_tenant_hostname_key":   {Code: tenants.EConflict, Field: "hostname", Message: fmt.Sprintf("the tenant has the host name %q already", d.Hostname)},
		"domains_verified_hostname_key": verifiedElsewhere(d.Hostname),
	}
}

func verifiedElsewhere(host string) *tenants.Error {
	return &tenants.Error{Code: tenants.EConflict, Field: "hostname",
		Message: fmt.Sprintf("the host name %q is verified by another tenant", host)}
}

// verifiedByOther reports whether another tenant than tenantID holds a verified claim of
// host. The partial unique index is what guarantees it; this asks first, to answer a
// clear conflict without an aborted statement.
func verifiedByOther(ctx context.Context, tx pgx.Tx, tenantID, host string) (bool, error) {
	var taken bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM domains WHERE hostname = $1 AND status = 'verified' AND tenant_id <> $2)`,
		host, tenantID).Scan(&taken)
	return taken, err
}

// newDomainToken is a claim's token: 128 random bits, hex, so it survives any DNS
// console's handling of TXT text (no case, no quotes, no spaces).
func newDomainToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// CreateDomain validates d (without the edge-domain rule, which the api applies: the
// store does not know the edge domain), stores it as a pending claim with a new id, token
// and version 1, and fills in d. EValidation, EConflict (the tenant has the host name, or
// another tenant's claim of it is verified), ENotFound (tenant).
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
		if err := checkCount(ctx, tx, tid, tenants.ResDomains); err != nil {
			return err
		}
		if taken, err := verifiedByOther(ctx, tx, tid, d.Hostname); err != nil || taken {
			if err == nil {
				err = verifiedElsewhere(d.Hostname)
			}
			return err
		}
		saved, err := scanDomain(tx.QueryRow(ctx, `INSERT INTO domains (tenant_id, id, hostname, certificate_pem, private_key_pem, not_after,
				status, token, next_check_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, coalesce($8, now())) RETURNING `+domainColumns,
			tid, id, d.Hostname, d.CertificatePEM, d.PrivateKeyPEM, d.NotAfter, newDomainToken(), d.NextCheckAt))
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
		WHERE tenant_id = $1 AND id > $2 ORDER BY domains.id LIMIT $3`, tenantID, cursor, limit+1)
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
// current, and fills in d. The same host name keeps the claim's status and token; another
// one is a new claim: pending, with a new token, first checked at d.NextCheckAt (nil: at
// once). ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdateDomain(ctx context.Context, d *tenants.Domain) error {
	if !parseID(d.TenantID) || !parseID(d.ID) {
		return notFound("domain")
	}
	if err := d.Validate("", time.Now()); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		if taken, err := verifiedByOther(ctx, tx, d.TenantID, d.Hostname); err != nil || taken {
			if err == nil {
				err = verifiedElsewhere(d.Hostname)
			}
			return err
		}
		// In SET, a column names its value before the update: "renamed" below is
		// hostname <> $4.
		saved, err := scanDomain(tx.QueryRow(ctx, `UPDATE domains SET hostname = $4, certificate_pem = $5, private_key_pem = $6,
			not_after = $7, version = version + 1, updated_at = now(),
			status        = CASE WHEN hostname = $4 THEN status ELSE 'pending' END,
			token         = CASE WHEN hostname = $4 THEN token ELSE $8 END,
			verified_at   = CASE WHEN hostname = $4 THEN verified_at END,
			checked_at    = CASE WHEN hostname = $4 THEN checked_at END,
			last_error    = CASE WHEN hostname = $4 THEN last_error ELSE '' END,
			failures      = CASE WHEN hostname = $4 THEN failures ELSE 0 END,
			pending_since = CASE WHEN hostname = $4 THEN pending_since ELSE now() END,
			next_check_at = CASE WHEN hostname = $4 THEN next_check_at ELSE coalesce($9, now()) END
			WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+domainColumns,
			d.TenantID, d.ID, d.Version, d.Hostname, d.CertificatePEM, d.PrivateKeyPEM, d.NotAfter, newDomainToken(), d.NextCheckAt))
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
	err := db.write(ctx, func(tx pgx.Tx) error { return deleteDomain(ctx, tx, tenantID, id) })
	return constraintError(err, "delete domain", nil)
}

// deleteDomain is DeleteDomain's work in tx.
func deleteDomain(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	var tid, did string
	err := tx.QueryRow(ctx, `DELETE FROM domains WHERE tenant_id = $1 AND id = $2
		RETURNING tenant_id::text, id::text`, tenantID, id).Scan(&tid, &did)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("domain")
	}
	if err != nil {
		return err
	}
	uncount(ctx, tx, tid, tenants.ResDomains)
	return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindDomain, did)))
}

// DueDomains leases up to n domains whose automatic check is due at now (see
// tenants.DomainService). Replicas share the work without a lock: SKIP LOCKED hands each
// due row to one caller, and the lease keeps it from the others until that caller
// records its check (or dies, and the lease runs out).
func (db *DB) DueDomains(ctx context.Context, now time.Time, lease time.Duration, n int) ([]*tenants.Domain, error) {
	ctx, cancel := db.bound(ctx) // the checks' loop has no deadline of its own
	defer cancel()
	rows, err := db.pool.Query(ctx, `UPDATE domains d SET next_check_at = $2
		FROM (SELECT tenant_id, id FROM domains WHERE next_check_at <= $1
			ORDER BY next_check_at LIMIT $3 FOR UPDATE SKIP LOCKED) due
		WHERE d.tenant_id = due.tenant_id AND d.id = due.id
		RETURNING `+prefixed("d.", domainColumns), now, now.Add(lease), n)
	if err != nil {
		return nil, constraintError(err, "due domains", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Domain, error) { return scanDomain(r) })
	return list, constraintError(err, "due domains", nil)
}

// prefixed qualifies each column of a column list with a table alias.
func prefixed(alias, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = alias + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// RecordProof records a check of a claim (see tenants.DomainService). The row is locked
// while the outcome is applied, so a check and an edit of the domain (or two checks)
// never interleave; the DNS lookup itself happened before, outside the transaction.
func (db *DB) RecordProof(ctx context.Context, tenantID, id, token string, p tenants.Proof, now time.Time, s tenants.DomainSchedule, manual bool) (*tenants.Domain, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("domain")
	}
	ctx, cancel := db.bound(ctx) // as DueDomains
	defer cancel()
	var out *tenants.Domain
	var taken bool
	err := db.write(ctx, func(tx pgx.Tx) error {
		d, err := scanDomain(tx.QueryRow(ctx, `SELECT `+domainColumns+` FROM domains WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("domain")
		}
		if err != nil {
			return err
		}
		out = d
		if d.Verification.Value != token {
			return nil // a check of a claim that has been replaced
		}
		if p.Outcome == tenants.ProofFound && !d.Verified() {
			if taken, err = verifiedByOther(ctx, tx, d.TenantID, d.Hostname); err != nil {
				return err
			}
			if taken {
				p = tenants.Proof{Outcome: tenants.ProofTaken, Reason: fmt.Sprintf(
					"the TXT record is in place, but another tenant's claim of %s is verified", d.Hostname)}
			}
		}
		changed := d.ApplyProof(p, now, s, manual)
		bump := 0
		if changed {
			bump = 1 // the ETag follows what clients see change, not every check
		}
		saved, err := scanDomain(tx.QueryRow(ctx, `UPDATE domains SET status = $3, verified_at = $4, checked_at = $5,
			next_check_at = $6, last_error = $7, failures = $8, pending_since = $9,
			version = version + $10, updated_at = CASE WHEN $10 = 1 THEN now() ELSE updated_at END
			WHERE tenant_id = $1 AND id = $2 RETURNING `+domainColumns,
			d.TenantID, d.ID, d.Status, d.VerifiedAt, d.CheckedAt, d.NextCheckAt, d.LastError, d.Failures, d.PendingSince, bump))
		if err != nil {
			return err
		}
		out = saved
		if !changed {
			return nil
		}
		return emit(ctx, tx, domainChange(saved))
	})
	if err != nil {
		var hostname string
		if out != nil {
			hostname = out.Hostname
		}
		return nil, constraintError(err, "record domain proof", map[string]*tenants.Error{
			"domains_verified_hostname_key": verifiedElsewhere(hostname),
		})
	}
	if taken {
		return out, verifiedElsewhere(out.Hostname)
	}
	return out, nil
}

var _ tenants.DomainService = (*DB)(nil)
