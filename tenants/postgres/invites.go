package postgres

import (
	"context"

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
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
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
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
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

// Invite adds the member at once when the email has an account, else keeps the invite.
func (db *DB) Invite(ctx context.Context, inv *tenants.Invite) (*tenants.Membership, error) {
	if err := tenants.ValidateMemberRole(inv.Role); err != nil {
		return nil, err
	}
	email, err := tenants.NormalizeEmail(inv.Email)
	if err != nil {
		return nil, err
	}
	if !parseID(inv.TenantID) {
		return nil, notFound("tenant")
	}
	inv.Email = email
	if _, err := db.FindUserByEmail(ctx, email); err == nil {
		m := &tenants.Membership{TenantID: inv.TenantID, Email: email, Role: inv.Role}
		if err := db.AddMember(ctx, m); err != nil {
			return nil, err
		}
		return m, nil
	} else if tenants.ErrorCode(err) != tenants.ENotFound {
		return nil, err
	}
	err = db.pool.QueryRow(ctx, `INSERT INTO invites (tenant_id, email, role, invited_by) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant_id, email) DO UPDATE SET role = EXCLUDED.role, invited_by = EXCLUDED.invited_by
		RETURNING created_at`, inv.TenantID, email, inv.Role, inv.InvitedBy).Scan(&inv.CreatedAt)
	inv.CreatedAt = utc(inv.CreatedAt)
	return nil, constraintError(err, "invite", nil)
}

// ListInvites lists a tenant's pending invites by email.
func (db *DB) ListInvites(ctx context.Context, tenantID string) ([]*tenants.Invite, error) {
	if !parseID(tenantID) {
		return []*tenants.Invite{}, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT tenant_id::text, email, role, invited_by, created_at FROM invites
		WHERE tenant_id = $1 ORDER BY email LIMIT 500`, tenantID)
	if err != nil {
		return nil, constraintError(err, "list invites", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Invite, error) {
		var inv tenants.Invite
		err := r.Scan(&inv.TenantID, &inv.Email, &inv.Role, &inv.InvitedBy, &inv.CreatedAt)
		inv.CreatedAt = utc(inv.CreatedAt)
		return &inv, err
	})
	return list, constraintError(err, "list invites", nil)
}

// DeleteInvite: ENotFound.
func (db *DB) DeleteInvite(ctx context.Context, tenantID, email string) error {
	email, err := tenants.NormalizeEmail(email)
	if err != nil || !parseID(tenantID) {
		return notFound("invite")
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM invites WHERE tenant_id = $1 AND email = $2`, tenantID, email)
	if err != nil {
		return constraintError(err, "delete invite", nil)
	}
	if tag.RowsAffected() == 0 {
		return notFound("invite")
	}
	return nil
}

// acceptInvites turns the pending invites of email into memberships of userID, in the
// sign-up's transaction.
func acceptInvites(ctx context.Context, tx pgx.Tx, userID, email string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role)
		SELECT tenant_id, $1, role FROM invites WHERE email = $2
		ON CONFLICT (tenant_id, user_id) DO NOTHING`, userID, email); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM invites WHERE email = $1`, email)
	return err
}
