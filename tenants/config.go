package tenants

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Config entries are what the control plane fans out to the edges: one KV entry per object,
// keyed
//
//	<tenant_id>.tenant
//	<tenant_id>.route.<route_id>
//	<tenant_id>.consumer.<consumer_id>
//	<tenant_id>.key.<key_id>
//	<tenant_id>.plan.<plan_id>
//	<tenant_id>.jwt-issuer.<issuer_id>
//	<tenant_id>.policy
//	<tenant_id>.domain.<domain_id>
//
// Why one entry per object rather than one per tenant: a change to one route of a tenant
// with 10,000 routes publishes one small value instead of rewriting megabytes (over NATS's
// 1 MB payload limit), and the edge still rebuilds only that tenant. Why the tenant id
// first: an edge (or an operator) can take one tenant with the subject filter
// "<tenant_id>.>", and 100,000 tenants are just more subjects in a stream with history 1,
// which JetStream indexes per subject; a booting edge reads them all with one ordered
// consumer at wire speed. Ids are UUIDs, which are valid KV key tokens.
//
// Every value carries Rev, the control plane's global change sequence (the outbox id):
// an edge ignores an entry whose Rev is not newer than the one it holds for that key, so a
// replayed or late publish never rolls config back.
type Entry struct {
	Rev      int64         `json:"rev"`
	Tenant   *Tenant       `json:"tenant,omitempty"`
	Route    *Route        `json:"route,omitempty"`
	Consumer *Consumer     `json:"consumer,omitempty"`
	Key      *KeyEntry     `json:"key,omitempty"`
	Plan     *ConsumerPlan `json:"plan,omitempty"`
	// JWTIssuer carries its HS256Secret, if any: the edges verify with it.
	JWTIssuer   *Issuer      `json:"jwt_issuer,omitempty"`
	AccessRules *AccessRules `json:"policy,omitempty"`
	// Domain carries the certificate's private key: the edges terminate TLS with it.
	Domain *Domain `json:"domain,omitempty"`
	// Trace is the W3C traceparent of the request that made the change, when it was
	// traced: the edges' apply spans join its trace.
	Trace string `json:"trace,omitempty"`
}

// KeyEntry is what the edge needs of a key: the hash to look the request's key up by.
type KeyEntry struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	ConsumerID string `json:"consumer_id"`
	Hash       string `json:"hash"` // hex SHA-256
	// ExpiresAt is the key's expiry in Unix seconds; 0: it does not expire.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

// Entry kinds, the second token of a key.
const (
	KindTenant   = "tenant"
	KindRoute    = "route"
	KindConsumer = "consumer"
	KindKey      = "key"
	KindPlan     = "plan"
	// KindJWTIssuer entries are keyed by issuer id; KindAccessRules, one per tenant, like
	// KindTenant by the tenant alone.
	KindJWTIssuer   = "jwt-issuer"
	KindAccessRules = "policy"
	KindDomain      = "domain"
)

// TenantKey and ObjectKey build entry keys.
func TenantKey(tenantID string) string           { return tenantID + "." + KindTenant }
func AccessRulesKey(tenantID string) string      { return tenantID + "." + KindAccessRules }
func ObjectKey(tenantID, kind, id string) string { return tenantID + "." + kind + "." + id }

// TenantFilter is the KV key filter matching every entry of a tenant.
func TenantFilter(tenantID string) string { return tenantID + ".>" }

// EntryKey is the KV key of e, which must hold exactly one object.
func (e *Entry) EntryKey() (string, error) {
	switch {
	case e.Tenant != nil:
		return TenantKey(e.Tenant.ID), nil
	case e.Route != nil:
		return ObjectKey(e.Route.TenantID, KindRoute, e.Route.ID), nil
	case e.Consumer != nil:
		return ObjectKey(e.Consumer.TenantID, KindConsumer, e.Consumer.ID), nil
	case e.Key != nil:
		return ObjectKey(e.Key.TenantID, KindKey, e.Key.ID), nil
	case e.Plan != nil:
		return ObjectKey(e.Plan.TenantID, KindPlan, e.Plan.ID), nil
	case e.JWTIssuer != nil:
		return ObjectKey(e.JWTIssuer.TenantID, KindJWTIssuer, e.JWTIssuer.ID), nil
	case e.AccessRules != nil:
		return AccessRulesKey(e.AccessRules.TenantID), nil
	case e.Domain != nil:
		return ObjectKey(e.Domain.TenantID, KindDomain, e.Domain.ID), nil
	}
	return "", fmt.Errorf("entry holds no object")
}

// ParsedKey is a KV key taken apart.
type ParsedKey struct {
	TenantID string
	Kind     string
	ID       string // empty for KindTenant and KindAccessRules
}

// ParseKey takes an entry key apart, refusing anything not of the layout above.
func ParseKey(key string) (ParsedKey, error) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) == 2 && parts[1] == KindTenant && parts[0] != "":
		return ParsedKey{TenantID: parts[0], Kind: KindTenant}, nil
	case len(parts) == 2 && parts[1] == KindAccessRules && parts[0] != "":
		return ParsedKey{TenantID: parts[0], Kind: KindAccessRules}, nil
	case len(parts) == 3 && parts[0] != "" && parts[2] != "":
		switch parts[1] {
		case KindRoute, KindConsumer, KindKey, KindPlan, KindJWTIssuer, KindDomain:
			return ParsedKey{TenantID: parts[0], Kind: parts[1], ID: parts[2]}, nil
		}
	}
	return ParsedKey{}, fmt.Errorf("config key %q is not <tenant>.tenant, <tenant>.policy or <tenant>.<route|consumer|key|plan|jwt-issuer|domain>.<id>", key)
}

// DecodeEntry parses a KV value stored under key and checks that it holds exactly the
// object the key names, so a misfiled entry can never change another object or tenant.
func DecodeEntry(key string, value []byte) (ParsedKey, *Entry, error) {
	pk, err := ParseKey(key)
	if err != nil {
		return pk, nil, err
	}
	var e Entry
	if err := json.Unmarshal(value, &e); err != nil {
		return pk, nil, fmt.Errorf("config entry %s: %v", key, err)
	}
	n := 0
	for _, set := range []bool{e.Tenant != nil, e.Route != nil, e.Consumer != nil, e.Key != nil, e.Plan != nil, e.JWTIssuer != nil, e.AccessRules != nil, e.Domain != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return pk, nil, fmt.Errorf("config entry %s holds %d objects, want 1", key, n)
	}
	var tenantID, id, kind string
	switch {
	case e.Tenant != nil:
		tenantID, id, kind = e.Tenant.ID, "", KindTenant
	case e.Route != nil:
		tenantID, id, kind = e.Route.TenantID, e.Route.ID, KindRoute
	case e.Consumer != nil:
		tenantID, id, kind = e.Consumer.TenantID, e.Consumer.ID, KindConsumer
	case e.Key != nil:
		tenantID, id, kind = e.Key.TenantID, e.Key.ID, KindKey
	case e.Plan != nil:
		tenantID, id, kind = e.Plan.TenantID, e.Plan.ID, KindPlan
	case e.JWTIssuer != nil:
		tenantID, id, kind = e.JWTIssuer.TenantID, e.JWTIssuer.ID, KindJWTIssuer
	case e.AccessRules != nil:
		tenantID, id, kind = e.AccessRules.TenantID, "", KindAccessRules
	case e.Domain != nil:
		tenantID, id, kind = e.Domain.TenantID, e.Domain.ID, KindDomain
	}
	if tenantID != pk.TenantID || id != pk.ID || kind != pk.Kind {
		return pk, nil, fmt.Errorf("config entry %s holds %s %s of tenant %s", key, kind, id, tenantID)
	}
	return pk, &e, nil
}

// Change is one outbox record on its way to the KV bucket: the entry to put under Key, or
// a delete of Key when Value is nil. Rev is the outbox id; changes are published in Rev
// order.
type Change struct {
	Rev   int64
	Key   string
	Value []byte
	// Cell is the cell whose bucket the change goes to: its tenant's cell when it was
	// written ("" is the default cell).
	Cell string
}
