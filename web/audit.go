package web

import (
	"maps"
	"slices"

	"tollgate/tenants"
)

// What the audit page shows of an entry's changes (tenants.AuditChanges), in the order a
// reader scans it: fields by path, objects created, then updated, then deleted.

// auditField is a changed field as the page shows it: its values as JSON, "" for unset.
type auditField struct {
	Path, Before, After string
	Redacted            bool
}

// auditObject is an object an apply created, updated or deleted.
type auditObject struct {
	Verb, Kind, Name string
	Fields           []auditField
}

// auditFields lists m's fields by path.
func auditFields(m map[string]tenants.FieldChange) []auditField {
	out := make([]auditField, 0, len(m))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		f := m[p]
		out = append(out, auditField{Path: p, Before: string(f.Before), After: string(f.After), Redacted: f.Redacted})
	}
	return out
}

// auditObjects lists c's objects, created, then updated, then deleted.
func auditObjects(c *tenants.AuditChanges) []auditObject {
	var out []auditObject
	for _, o := range c.Created {
		out = append(out, auditObject{Verb: "created", Kind: o.Kind, Name: o.Name})
	}
	for _, o := range c.Updated {
		out = append(out, auditObject{Verb: "updated", Kind: o.Kind, Name: o.Name, Fields: auditFields(o.Fields)})
	}
	for _, o := range c.Deleted {
		out = append(out, auditObject{Verb: "deleted", Kind: o.Kind, Name: o.Name})
	}
	return out
}
