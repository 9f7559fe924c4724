package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// writeTx is the transaction change hands to a write: it learns, as the write goes, what
// the audit entry of the change needs and the caller could not know beforehand, the
// tenant and the object.
type writeTx struct {
	pgx.Tx
	named          bool // tenantID and object are set
	tenantID       string
	object         string
	also           []tenants.AuditEntry // further entries the change makes
	firstChangeKey string               // the key of the first config change emitted
}

// auditObject names the tenant and object of tx's change for its audit entry, where the
// config changes it emits would not (a token, an invite, a membership), or would name the
// wrong one. tx must be the one change handed to its write.
func auditObject(tx pgx.Tx, tenantID, object string) {
	if wt, ok := tx.(*writeTx); ok {
		wt.named, wt.tenantID, wt.object = true, tenantID, object
	}
}

// auditAlso adds a further entry to tx's change, by the same actor: accepting an invite
// also makes a membership.
func auditAlso(tx pgx.Tx, tenantID, action, object string) {
	if wt, ok := tx.(*writeTx); ok {
		wt.also = append(wt.also, tenants.AuditEntry{TenantID: tenantID, Action: action, Object: object})
	}
}

// emitted tells tx which config changes its write emitted: the first one names the
// object, unless the write named it itself.
func (wt *writeTx) emitted(changes []change) {
	if wt.firstChangeKey == "" && len(changes) > 0 {
		wt.firstChangeKey = changes[0].key
	}
}

// recordAudit inserts the audit entries of ctx's audit, if any. What the caller set wins;
// the rest comes from the write: the tenant and object it named, else the first config
// change it emitted (a tenant or its access rules name "", the tenant itself).
func (wt *writeTx) recordAudit(ctx context.Context) error {
	a, ok := tenants.AuditOf(ctx)
	if !ok {
		return nil
	}
	tenantID, object := wt.tenantID, wt.object
	if !wt.named && wt.firstChangeKey != "" {
		k, err := tenants.ParseKey(wt.firstChangeKey)
		if err != nil {
			return fmt.Errorf("postgres: audit %s: %w", a.Action, err)
		}
		tenantID, object = k.TenantID, k.ID
	}
	if a.TenantID != "" {
		tenantID = a.TenantID
	}
	if a.Object != "" {
		object = a.Object
	}
	entries := append([]tenants.AuditEntry{{TenantID: tenantID, Action: a.Action, Object: object}}, wt.also...)
	b := &pgx.Batch{}
	for _, e := range entries {
		if !parseID(e.TenantID) {
			// A caller that asks for an entry its write cannot place is a bug: better no
			// change than a change the log does not show.
			return fmt.Errorf("postgres: audit %s: no tenant to record it in", e.Action)
		}
		b.Queue(`INSERT INTO audit_log (tenant_id, actor, action, object) VALUES ($1, $2, $3, $4)`,
			e.TenantID, a.Actor, e.Action, e.Object)
	}
	if err := wt.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: audit %s: %w", a.Action, err)
	}
	return nil
}
