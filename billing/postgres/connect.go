package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tollgate/billing"
	"tollgate/tenants"
)

// Connected accounts proven through Stripe's onboarding (stripe_connect_accounts, migration
// 00019). The ids tenants typed in before (stripe_accounts) are only read here, to be
// shown as unproven, and deleted once the tenant connects through Stripe or disconnects.

// ConnectStatus is the tenant's connected account as last recorded.
func (s *Store) ConnectStatus(ctx context.Context, tenantID string) (*billing.ConnectedAccount, error) {
	if !validUUID(tenantID) {
		return &billing.ConnectedAccount{Status: billing.ConnectNone}, nil
	}
	return connectStatus(ctx, s.pool, tenantID)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func connectStatus(ctx context.Context, q queryRower, tenantID string) (*billing.ConnectedAccount, error) {
	var a billing.ConnectedAccount
	var acct, typed *string
	var details, charges *bool
	err := q.QueryRow(ctx, `SELECT c.account_id, c.details_submitted, c.charges_enabled, c.checked_at, t.account_id
		FROM (SELECT $1::uuid AS tenant_id) k
		LEFT JOIN stripe_connect_accounts c ON c.tenant_id = k.tenant_id
		LEFT JOIN stripe_accounts t ON t.tenant_id = k.tenant_id`, tenantID).
		Scan(&acct, &details, &charges, &a.CheckedAt, &typed)
	if err != nil {
		return nil, fmt.Errorf("connected account: %w", err)
	}
	switch {
	case acct != nil:
		a.AccountID, a.DetailsSubmitted, a.ChargesEnabled = *acct, *details, *charges
		a.Status = billing.ConnectOnboarding
		if a.ChargesEnabled {
			a.Status = billing.ConnectReady
		}
	case typed != nil:
		a.Status, a.UnprovenAccountID = billing.ConnectUnproven, *typed
	default:
		a.Status = billing.ConnectNone
	}
	return &a, nil
}

// AttachConnectedAccount records the account the platform created for the tenant on
// Stripe, unless the tenant has one already; it answers the tenant's account either way,
// so two racing onboardings agree on the first. The unproven id the tenant may have typed
// in before is deleted in the same transaction. EConflict when the account is another
// tenant's. The audit entry attached to ctx, if any, is written with it.
func (s *Store) AttachConnectedAccount(ctx context.Context, tenantID, accountID string) (*billing.ConnectedAccount, error) {
	if !validUUID(tenantID) {
		return nil, tenants.Invalid("tenant_id", "must be a UUID")
	}
	if err := billing.ValidAccount(accountID); err != nil {
		return nil, err
	}
	var out *billing.ConnectedAccount
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO stripe_connect_accounts (tenant_id, account_id) VALUES ($1, $2)
			ON CONFLICT (tenant_id) DO NOTHING`, tenantID, accountID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `DELETE FROM stripe_accounts WHERE tenant_id = $1`, tenantID); err != nil {
				return err
			}
			if err := recordAudit(ctx, tx, tenantID, accountID); err != nil {
				return err
			}
		}
		out, err = connectStatus(ctx, tx, tenantID)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, tenants.Errorf(tenants.EConflict, "Stripe account %s is connected to another tenant", accountID)
	}
	if err != nil {
		return nil, fmt.Errorf("attach connected account: %w", err)
	}
	return out, nil
}

// RecordConnectedAccount records what Stripe said of the tenant's account at a time. An
// answer about an account the tenant no longer holds (it disconnected meanwhile) changes
// nothing: ENotFound.
func (s *Store) RecordConnectedAccount(ctx context.Context, tenantID, accountID string, detailsSubmitted, chargesEnabled bool, at time.Time) (*billing.ConnectedAccount, error) {
	if !validUUID(tenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no connected account")
	}
	tag, err := s.pool.Exec(ctx, `UPDATE stripe_connect_accounts
		SET details_submitted = $3, charges_enabled = $4, checked_at = $5
		WHERE tenant_id = $1 AND account_id = $2`, tenantID, accountID, detailsSubmitted, chargesEnabled, at)
	if err != nil {
		return nil, fmt.Errorf("record connected account: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, tenants.Errorf(tenants.ENotFound, "Stripe account %s is not the tenant's", accountID)
	}
	return s.ConnectStatus(ctx, tenantID)
}

// DisconnectAccount forgets the tenant's connected account and any unproven id; "" is
// written to the audit entry attached to ctx when it had neither.
func (s *Store) DisconnectAccount(ctx context.Context, tenantID string) error {
	if !validUUID(tenantID) {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var gone []string
		for _, q := range []string{
			`DELETE FROM stripe_connect_accounts WHERE tenant_id = $1 RETURNING account_id`,
			`DELETE FROM stripe_accounts WHERE tenant_id = $1 RETURNING account_id`,
		} {
			var id string
			err := tx.QueryRow(ctx, q, tenantID).Scan(&id)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if id != "" {
				gone = append(gone, id)
			}
		}
		object := ""
		if len(gone) > 0 {
			object = gone[0]
		}
		return recordAudit(ctx, tx, tenantID, object)
	})
	if err != nil {
		return fmt.Errorf("disconnect account: %w", err)
	}
	return nil
}

// CheckoutAccount is the account a consumer's checkout of the tenant runs on: the
// connected account when Stripe lets it take charges, "" (the platform's) when the tenant
// has none. EConflict when it has one that cannot be used: onboarding unfinished, or only
// an id typed in that nothing proved. Falling back to the platform then would take the
// consumer's money where the tenant did not ask for it.
func (s *Store) CheckoutAccount(ctx context.Context, tenantID string) (string, error) {
	a, err := s.ConnectStatus(ctx, tenantID)
	if err != nil {
		return "", err
	}
	switch a.Status {
	case billing.ConnectReady:
		return a.AccountID, nil
	case billing.ConnectNone:
		return "", nil
	case billing.ConnectOnboarding:
		return "", tenants.Errorf(tenants.EConflict, "payments are not set up: the tenant's Stripe account cannot take charges yet (its onboarding with Stripe is not finished)")
	}
	return "", tenants.Errorf(tenants.EConflict, "payments are not set up: the tenant's Stripe account was never connected through Stripe")
}
