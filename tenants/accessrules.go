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
//
// It is also the API's body (PUT /v1/tenants/{slug}/policy; the tags are Route's) and
// the stored object.
type AccessRules struct {
	TenantID  string     `json:"tenant_id" readonly:"true"`
	Rules     [][]string `json:"rules" required:"true" doc:"Up to 1000 rules [subject, path pattern, action] or [subject, path pattern, action, \"allow\"|\"deny\"]. subject: a consumer id or name, a role, or * (any authenticated caller). path pattern: a normalized path where a whole segment may be :param, and the last may be * (see the README). action: GET, GET|POST or * (any)."`
	Roles     [][]string `json:"roles" doc:"Up to 10000 links [member, role]: a consumer (id or name) or role holds the role. Roles may inherit roles, up to 10 deep, without cycles."`
	Version   int64      `json:"version" readonly:"true" doc:"Bumped by every change; the ETag. Send it back in If-Match."`
	CreatedAt time.Time  `json:"created_at" readonly:"true"`
	UpdatedAt time.Time  `json:"updated_at" readonly:"true"`
}
