package tenants

import (
	"context"
	"strings"
	"time"
)

// The audit log: what management writes changed, by whom. An entry is written by the
// store in the transaction of the change it records, so a change and its entry commit or
// roll back together. The caller says who does what (WithAudit) before calling the store;
// the store adds what only the transaction knows, like the id of a created object.

// AuditEntry records one management write: who (a user's email, "token:<name>" or
// "admin"), in which tenant, what action on which object, and when.
type AuditEntry struct {
	ID       int64     `json:"id"`
	TenantID string    `json:"tenant_id"`
	Actor    string    `json:"actor"`
	Action   string    `json:"action"` // "<kind>.<verb>": routes.create, keys.delete… (AuditAction)
	Object   string    `json:"object"` // the object's id, or "" for the tenant itself
	At       time.Time `json:"at"`
	// Changes says what the write changed, when it is one that knows: an update's fields
	// before and after, an apply's or an import's objects. Secrets are never in it.
	Changes *AuditChanges `json:"changes,omitempty"`
}

// AuditService reads the audit log. Entries are written only by the writes they record
// (WithAudit), and never changed or deleted.
type AuditService interface {
	// ListAudit returns a page of a tenant's entries in q's range, newest first; the
	// cursor is an id.
	ListAudit(ctx context.Context, tenantID string, q AuditQuery) ([]*AuditEntry, string, error)
}

// AuditQuery asks for a page of the entries written in [From, To); a zero bound is open.
type AuditQuery struct {
	Page
	From, To time.Time
}

// ParseAuditRange reads the bounds of an audit query as the API and the console take them:
// RFC 3339, or YYYY-MM-DD for a whole UTC day (to: the day is included). Empty: open.
func ParseAuditRange(from, to string) (f, t time.Time, err error) {
	parse := func(field, s string, dayEnd bool) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		if d, err := time.Parse(time.DateOnly, s); err == nil {
			if dayEnd {
				d = d.AddDate(0, 0, 1)
			}
			return d, nil
		}
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, Invalid(field, "must be YYYY-MM-DD or an RFC 3339 time")
		}
		return v.UTC(), nil
	}
	if f, err = parse("from", from, false); err != nil {
		return f, t, err
	}
	if t, err = parse("to", to, true); err != nil {
		return f, t, err
	}
	if !f.IsZero() && !t.IsZero() && !t.After(f) {
		return f, t, Invalid("to", "must be after from")
	}
	return f, t, nil
}

// Audit verbs: the second half of an action.
const (
	AuditCreate  = "create"
	AuditUpdate  = "update"
	AuditDelete  = "delete"
	AuditVerify  = "verify"
	AuditAccept  = "accept"
	AuditDecline = "decline"
	AuditApply   = "apply" // a config document applied: one entry however many objects it changed
)

// AuditAction names an action "<kind>.<verb>" from the kind of object changed, spelled as
// in the API's paths and tags ("jwt-issuers" is written jwt_issuers), so the API and the
// console name the same change alike.
func AuditAction(kind, verb string) string {
	return strings.ReplaceAll(kind, "-", "_") + "." + verb
}

// Audit is the entry the writes made with a context are to record. TenantID and Object
// may be left empty when only the write knows them (a create's new id, the tenant an
// invitation was to): the store fills them in from its transaction.
type Audit struct {
	TenantID string
	Actor    string
	Action   string
	Object   string
}

type auditKey struct{}

// WithAudit returns a context whose store writes each record a as their audit entry, in
// their own transaction. Attach it only to the context of the write a request makes:
// every write made with it records an entry.
func WithAudit(ctx context.Context, a Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

// AuditOf is the audit entry attached to ctx by WithAudit, if any.
func AuditOf(ctx context.Context) (Audit, bool) {
	a, ok := ctx.Value(auditKey{}).(Audit)
	return a, ok
}
