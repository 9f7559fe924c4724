package postgres

import (
	"context"
	"encoding/json"
	"errors"
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
	audited        bool                 // the change records an audit entry
	bulk           bool                 // an apply: it says what changed itself, its writes do not
	changes        *tenants.AuditChanges

	counts        map[countKey]int64 // objects added (removed) by the write, not yet stored (quota.go)
	sharedLocks   map[string]bool    // tenants whose rows the write locked FOR SHARE (quota.go)
	exclusive     bool               // limits are checked under the tenant's exclusive lock
	deferred      bool               // emit collects changes, written once when fn ends
	notifyInTx    bool               // see WithNotifyInTransaction
	sharedChecks  bool               // see WithSharedLimitChecks
	exclusiveRevs bool               // see WithSharedRevLock
	separateTrips bool               // see WithFoldedRoundTrips
	pending       []change
}

// auditing reports whether tx's change records an audit entry that its write is to say
// what changed in: the reading of an object's state before an update is spent only then.
func auditing(tx pgx.Tx) bool {
	wt, ok := tx.(*writeTx)
	return ok && wt.audited && !wt.bulk
}

// auditUpdate records in tx's audit entry the fields an update changed from before to
// after; before nil (not read, or not there) records nothing.
func auditUpdate[T any](tx pgx.Tx, before, after *T) {
	if before == nil || !auditing(tx) {
		return
	}
	if f := tenants.DiffFields(before, after); f != nil {
		tx.(*writeTx).changes = &tenants.AuditChanges{Fields: f}
	}
}

// auditBulk makes tx's change one that says what changed itself (an apply of many
// objects): the writes it makes do not.
func auditBulk(tx pgx.Tx) {
	if wt, ok := tx.(*writeTx); ok {
		wt.bulk = true
	}
}

// auditChanges records c as what tx's change changed.
func auditChanges(tx pgx.Tx, c *tenants.AuditChanges) {
	if wt, ok := tx.(*writeTx); ok && wt.audited {
		wt.changes = c
	}
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

// queueAudit queues in b the inserts of the audit entries of ctx's audit, if any. What
// the caller set wins; the rest comes from the write: the tenant and object it named,
// else the first config change it emitted (a tenant or its access rules name "", the
// tenant itself).
func (wt *writeTx) queueAudit(ctx context.Context, b *pgx.Batch) error {
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
	var changes []byte
	if !wt.changes.Empty() {
		wt.changes.Bound()
		var err error
		if changes, err = json.Marshal(wt.changes); err != nil {
			return fmt.Errorf("postgres: audit %s: %w", a.Action, err)
		}
	}
	entries := append([]tenants.AuditEntry{{TenantID: tenantID, Action: a.Action, Object: object}}, wt.also...)
	for i, e := range entries {
		if !parseID(e.TenantID) {
			// A caller that asks for an entry its write cannot place is a bug: better no
			// change than a change the log does not show.
			return fmt.Errorf("postgres: audit %s: no tenant to record it in", e.Action)
		}
		var c []byte // the changes are the first entry's, the change's own
		if i == 0 {
			c = changes
		}
		b.Queue(`INSERT INTO audit_log (tenant_id, actor, action, object, changes) VALUES ($1, $2, $3, $4, $5)`,
			e.TenantID, a.Actor, e.Action, e.Object, c)
	}
	return nil
}

// stateBefore reads, for the audit entry of tx's change, the object an update is about to
// replace: nil when the change records no entry (the read is spent only then) or the
// object is not there (the update then fails on its own terms).
func stateBefore[T any](ctx context.Context, tx pgx.Tx, scan func(pgx.Row) (*T, error), query string, args ...any) (*T, error) {
	if !auditing(tx) {
		return nil, nil
	}
	v, err := scan(tx.QueryRow(ctx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return v, err
}
