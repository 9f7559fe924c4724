package tenants

import "time"

// AccessRules are a tenant's access rules (the management API's "policy"): which callers
// (consumers, by id or name, or roles) may call which paths with which methods, and which
// roles consumers and roles hold. A tenant has at most one set; the routes with
// CheckAccess set are checked against it at the edge, and a tenant without one denies
// every call to them.
//
// Rules are [subject, path pattern, action] or [subject, path pattern, action, effect];
// Roles are [member, role] links. Their rules (patterns, effects, bounds) are those of the
// engine that compiles them, accessrules (Compile): the api validates with it, and the
// edge compiles it again for each snapshot.
type AccessRules struct {
	TenantID  string     `json:"tenant_id"`
	Rules     [][]string `json:"rules"`
	Roles     [][]string `json:"roles"`
	Version   int64      `json:"version"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}
