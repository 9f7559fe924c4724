package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Invites, role changes and removals of members. A tenant always keeps an owner: the
// changes that would leave it without one lock the tenant's owner rows and refuse.

// lastOwner reports whether userID is tenantID's only owner, locking the owner rows so two
// concurrent demotions cannot both pass.
func lastOwner(ctx context.Context, tx pgx.Tx, tenantID, userID string) (bool, error) {
	rows, err := tx.Query(ctx, `SELECT user_id::text FROM memberships WHERE tenant_id = $1 AND role = 'owner' FOR UPDATE`, tenantID)
	if err != nil {
		return false, err
	}
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	return len(owners) == 1 && owners[0] == userID, nil
}

var errLastOwner = &tenants.Error{Code: tenants.EConflict, Field: "role",
	Message: "this is the tenant's last owner: make another member an owner first"}

// SetMemberRole: EValidation, ENotFound, EConflict (the last owner).
func (db *DB) SetMemberRole(ctx context.Context, tenantID, userID, role string) (*tenants.Membership, error) {
	if err := tenants.ValidateMemberRole(role); err != nil {
		return nil, err
	}
	if !parseID(tenantID) || !parseID(userID) {
		return nil, notFound("membership")
	}
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		auditObject(tx, tenantID, userID)
		if role != tenants.RoleOwner {
			last, err := lastOwner(ctx, tx, tenantID, userID)
			if err != nil {
				return err
			}
			if last {
				return errLastOwner
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE memberships SET role = $3 WHERE tenant_id = $1 AND user_id = $2`, tenantID, userID, role)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("membership")
		}
		return nil
	})
	if err != nil {
		return nil, constraintError(err, "set member role", nil)
	}
	return db.FindMembership(ctx, tenantID, userID)
}

// RemoveMember: ENotFound, EConflict (the last owner).
func (db *DB) RemoveMember(ctx context.Context, tenantID, userID string) error {
	if !parseID(tenantID) || !parseID(userID) {
		return notFound("membership")
	}
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		auditObject(tx, tenantID, userID)
		last, err := lastOwner(ctx, tx, tenantID, userID)
		if err != nil {
			return err
		}
		if last {
			return &tenants.Error{Code: tenants.EConflict, Message: "this is the tenant's last owner: make another member an owner first"}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2`, tenantID, userID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("membership")
		}
		return nil
	})
	return constraintError(err, "remove member", nil)
}

// Invitations: an invite is a pending row with the SHA-256 of its link's token. Accepting
// or declining deletes the row in the transaction that checks the user, so the link works
// once; re-inviting overwrites the hash, so the older link names nothing any more.

// MaxPendingInvites bounds a tenant's unexpired invites, so a tenant cannot make the
// platform mail an unbounded list of strangers.
const MaxPendingInvites = 100

// Invitation mail is throttled per (tenant, address) and per tenant, where every api
// replica counts it, so an owner cannot make the platform mail-bomb an address or the
// world; re-sending to the same address a few times an hour stays possible.
var (
	InviteMailsPerAddress = tenants.ThrottleRule{Limit: 5, Window: time.Hour}
	InviteMailsPerTenant  = tenants.ThrottleRule{Limit: 200, Window: time.Hour}
)

// expiredInviteKept is how long an expired invite stays listed (so its inviter sees that it
// lapsed) before an invite of the same tenant sweeps it.
const expiredInviteKept = "30 days"

var (
	errInviteGone = tenants.Errorf(tenants.ENotFound,
		"this invitation link is not valid: it was already used, declined, withdrawn, or replaced by a newer invitation")
	errVerifyFirst = tenants.Errorf(tenants.EForbidden,
		"verify your email address first (follow the link mailed to you when you signed up, or have a new one sent), then open the invitation again")
	errOtherAddress = tenants.Errorf(tenants.EForbidden,
		"this invitation was sent to another address: sign in with the address it was sent to")
)

// Invite: EValidation, ENotFound (tenant), EConflict (already a member).
func (db *DB) Invite(ctx context.Context, inv *tenants.Invite) (string, error) {
	if err := tenants.ValidateMemberRole(inv.Role); err != nil {
		return "", err
	}
	email, err := tenants.NormalizeEmail(inv.Email)
	if err != nil {
		return "", err
	}
	if !parseID(inv.TenantID) {
		return "", notFound("tenant")
	}
	inv.Email = email
	for _, h := range []struct {
		key  string
		rule tenants.ThrottleRule
		what string
	}{
		{"invite:" + inv.TenantID + ":" + email, InviteMailsPerAddress, "invitations to this address"},
		{"invite:" + inv.TenantID, InviteMailsPerTenant, "invitations from this tenant"},
	} {
		wait, err := db.Hit(ctx, h.key, h.rule)
		if err != nil {
			return "", err
		}
		if wait > 0 {
			return "", tenants.Errorf(tenants.ERateLimited, "too many %s in the last hour: try again in %d minutes",
				h.what, int(wait.Minutes())+1)
		}
	}
	token, hash, _ := tenants.NewSecret(tenants.InvitePrefix)
	err = db.change(ctx, false, func(tx pgx.Tx) error {
		auditObject(tx, inv.TenantID, email)
		// The tenant row's lock (one that does not block inserts referencing it) orders
		// concurrent invites of one tenant, so the pending count below holds.
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE`, inv.TenantID).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("tenant")
			}
			return err
		}
		var member bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id
			WHERE m.tenant_id = $1 AND u.email = $2)`, inv.TenantID, email).Scan(&member); err != nil {
			return err
		}
		if member {
			return &tenants.Error{Code: tenants.EConflict, Field: "email",
				Message: email + " is already a member of this tenant: change their role in the member list instead"}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM invites WHERE tenant_id = $1 AND expires_at < now() - $2::interval`,
			inv.TenantID, expiredInviteKept); err != nil {
			return err
		}
		var pending int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM invites WHERE tenant_id = $1 AND email <> $2 AND expires_at > now()`,
			inv.TenantID, email).Scan(&pending); err != nil {
			return err
		}
		if pending >= MaxPendingInvites {
			return tenants.Invalid("email", "the tenant already has %d pending invitations: withdraw some, or wait until they are accepted or expire", MaxPendingInvites)
		}
		return tx.QueryRow(ctx, `INSERT INTO invites (tenant_id, email, role, invited_by, token_hash, expires_at)
			VALUES ($1, $2, $3, $4, $5, now() + $6::interval)
			ON CONFLICT (tenant_id, email) DO UPDATE SET role = EXCLUDED.role, invited_by = EXCLUDED.invited_by,
				token_hash = EXCLUDED.token_hash, expires_at = EXCLUDED.expires_at, created_at = now()
			RETURNING created_at, expires_at`,
			inv.TenantID, email, inv.Role, inv.InvitedBy, hash, tenants.InviteTTL.String()).Scan(&inv.CreatedAt, &inv.ExpiresAt)
	})
	if err != nil {
		return "", constraintError(err, "invite", nil)
	}
	inv.CreatedAt, inv.ExpiresAt = utc(inv.CreatedAt), utc(inv.ExpiresAt)
	return token, nil
}

const inviteColumns = `i.tenant_id::text, i.email, i.role, i.invited_by, i.expires_at, i.created_at`

func scanInvite(row pgx.Row, extra ...any) (*tenants.Invite, error) {
	var inv tenants.Invite
	if err := row.Scan(append([]any{&inv.TenantID, &inv.Email, &inv.Role, &inv.InvitedBy, &inv.ExpiresAt, &inv.CreatedAt}, extra...)...); err != nil {
		return nil, err
	}
	inv.ExpiresAt, inv.CreatedAt = utc(inv.ExpiresAt), utc(inv.CreatedAt)
	return &inv, nil
}

// ListInvites lists a tenant's pending invites by email.
func (db *DB) ListInvites(ctx context.Context, tenantID string) ([]*tenants.Invite, error) {
	if !parseID(tenantID) {
		return []*tenants.Invite{}, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+inviteColumns+` FROM invites i
		WHERE i.tenant_id = $1 ORDER BY i.email LIMIT 500`, tenantID)
	if err != nil {
		return nil, constraintError(err, "list invites", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Invite, error) { return scanInvite(r) })
	return list, constraintError(err, "list invites", nil)
}

// DeleteInvite: ENotFound.
func (db *DB) DeleteInvite(ctx context.Context, tenantID, email string) error {
	email, err := tenants.NormalizeEmail(email)
	if err != nil || !parseID(tenantID) {
		return notFound("invite")
	}
	err = db.change(ctx, false, func(tx pgx.Tx) error {
		auditObject(tx, tenantID, email)
		tag, err := tx.Exec(ctx, `DELETE FROM invites WHERE tenant_id = $1 AND email = $2`, tenantID, email)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("invite")
		}
		return nil
	})
	return constraintError(err, "delete invite", nil)
}

// inviteHash is the stored form of an invitation token; ok is false for a string that
// cannot be one, which then names no invite without a query.
func inviteHash(token string) (hash string, ok bool) {
	if !strings.HasPrefix(token, tenants.InvitePrefix) || len(token) > 64 {
		return "", false
	}
	return tenants.HashSecret(token), true
}

const offerSelect = `SELECT ` + inviteColumns + `, t.slug, t.name FROM invites i JOIN tenants t ON t.id = i.tenant_id
	WHERE i.token_hash = $1`

func scanOffer(row pgx.Row) (*tenants.InviteOffer, error) {
	var o tenants.InviteOffer
	inv, err := scanInvite(row, &o.TenantSlug, &o.TenantName)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errInviteGone
	}
	if err != nil {
		return nil, err
	}
	o.Invite = *inv
	return &o, nil
}

// FindInvite: ENotFound.
func (db *DB) FindInvite(ctx context.Context, token string) (*tenants.InviteOffer, error) {
	hash, ok := inviteHash(token)
	if !ok {
		return nil, errInviteGone
	}
	o, err := scanOffer(db.pool.QueryRow(ctx, offerSelect, hash))
	return o, constraintError(err, "find invite", nil)
}

// AcceptInvite: ENotFound (gone or expired), EForbidden (unverified or another address).
func (db *DB) AcceptInvite(ctx context.Context, token, userID string) (*tenants.Membership, error) {
	o, err := db.consumeInvite(ctx, token, userID, func(tx pgx.Tx, o *tenants.InviteOffer) error {
		_, err := tx.Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id, user_id) DO NOTHING`, o.TenantID, userID, o.Role)
		auditAlso(tx, o.TenantID, tenants.AuditAction("members", tenants.AuditCreate), userID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return db.FindMembership(ctx, o.TenantID, userID)
}

// DeclineInvite: as AcceptInvite.
func (db *DB) DeclineInvite(ctx context.Context, token, userID string) (*tenants.InviteOffer, error) {
	return db.consumeInvite(ctx, token, userID, nil)
}

// consumeInvite deletes the invite token names once userID may take it, and runs then in
// the same transaction. The invite row is locked first: a concurrent consumer waits, then
// finds the row gone.
func (db *DB) consumeInvite(ctx context.Context, token, userID string, then func(pgx.Tx, *tenants.InviteOffer) error) (*tenants.InviteOffer, error) {
	hash, ok := inviteHash(token)
	if !ok {
		return nil, errInviteGone
	}
	if !parseID(userID) {
		return nil, notFound("user")
	}
	var o *tenants.InviteOffer
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		var err error
		if o, err = scanOffer(tx.QueryRow(ctx, offerSelect+` FOR UPDATE OF i`, hash)); err != nil {
			return err
		}
		// The caller knows the invitation only by its token: the entry is the tenant's.
		auditObject(tx, o.TenantID, o.Email)
		var expired, verified bool
		var email string
		if err := tx.QueryRow(ctx, `SELECT $2::timestamptz <= now(), email, email_verified_at IS NOT NULL FROM users WHERE id = $1`,
			userID, o.ExpiresAt).Scan(&expired, &email, &verified); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("user")
			}
			return err
		}
		switch {
		case expired:
			return tenants.Errorf(tenants.ENotFound, "this invitation expired on %s: ask the tenant's owner or admin to invite you again",
				o.ExpiresAt.Format("2006-01-02 15:04 UTC"))
		case !verified:
			return errVerifyFirst
		case email != o.Email:
			return errOtherAddress
		}
		if _, err := tx.Exec(ctx, `DELETE FROM invites WHERE token_hash = $1`, hash); err != nil {
			return err
		}
		if then != nil {
			return then(tx, o)
		}
		return nil
	})
	if err != nil {
		return nil, constraintError(err, "consume invite", nil)
	}
	return o, nil
}
