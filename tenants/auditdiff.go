package tenants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// What a write changed, as its audit entry keeps it: small enough to store with every
// entry, and never a secret.

// AuditChanges says what a write changed: the fields of the object an update changed,
// or, for a config apply or an import, the objects it created, updated (each with its
// changed fields) and deleted, by name.
type AuditChanges struct {
	Fields  map[string]FieldChange `json:"fields,omitempty" doc:"An update's changed fields by JSON path (rate_limit.rps), each with its value before and after."`
	Created []ConfigChange         `json:"created,omitempty"`
	Updated []ObjectChange         `json:"updated,omitempty"`
	Deleted []ConfigChange         `json:"deleted,omitempty"`
	// Truncated says the record was cut to fit MaxAuditChangesBytes: long values are
	// elided first, then the fields of updated objects, then objects past the first ones.
	Truncated bool `json:"truncated,omitempty" doc:"The record was cut to its size bound; what is left is exact."`
}

// ObjectChange names one object a config apply updated, with the fields it changed.
type ObjectChange struct {
	Kind   string                 `json:"kind"`
	Name   string                 `json:"name"`
	Fields map[string]FieldChange `json:"fields,omitempty"`
}

// FieldChange is one field's JSON value before and after a write; a side is absent when
// the field was. A secret's values are never kept: Redacted says it changed.
type FieldChange struct {
	Before   json.RawMessage `json:"before,omitempty" doc:"The value before; absent when the field was unset."`
	After    json.RawMessage `json:"after,omitempty" doc:"The value after; absent when the field is now unset."`
	Redacted bool            `json:"redacted,omitempty" doc:"A secret (a key, a hash, an HS256 secret…) changed; its values are never recorded."`
}

// Size bounds of an entry's changes: a value longer than MaxAuditValueBytes is kept as a
// note of its size (a logo's data URL would otherwise fill the log), and the whole record
// stays under MaxAuditChangesBytes.
const (
	MaxAuditValueBytes   = 256
	MaxAuditChangesBytes = 16 << 10
)

// Empty reports whether c records nothing.
func (c *AuditChanges) Empty() bool {
	return c == nil || len(c.Fields) == 0 && len(c.Created) == 0 && len(c.Updated) == 0 && len(c.Deleted) == 0
}

// DiffFields compares what a client may write of two objects of one type (WritableJSON:
// read-only fields such as ids, versions and timestamps are left out) and returns the
// fields that differ, objects walked into so a path names the leaf (upstream.timeout_ms);
// lists are compared whole. Secrets are marked Redacted without their values. nil when
// nothing differs or either side cannot be encoded.
func DiffFields(before, after any) map[string]FieldChange {
	b, err1 := WritableJSON(before)
	a, err2 := WritableJSON(after)
	if err1 != nil || err2 != nil {
		return nil
	}
	old, cur := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	flatten("", b, old)
	flatten("", a, cur)
	out := map[string]FieldChange{}
	for path, v := range old {
		if w, ok := cur[path]; !ok || !bytes.Equal(v, w) {
			out[path] = fieldChange(path, v, w)
		}
	}
	for path, w := range cur {
		if _, ok := old[path]; !ok {
			out[path] = fieldChange(path, nil, w)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// flatten puts raw's leaves in out by their dotted path; null and empty values count as
// absent, so a field left out and one sent empty compare equal.
func flatten(prefix string, raw json.RawMessage, out map[string]json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			for k, v := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				flatten(p, v, out)
			}
			return
		}
	}
	switch string(raw) {
	case "", "null", `""`, "[]", "{}":
		return
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return
	}
	out[prefix] = buf.Bytes()
}

func fieldChange(path string, before, after json.RawMessage) FieldChange {
	if secretField(path) {
		return FieldChange{Redacted: true}
	}
	return FieldChange{Before: boundValue(before), After: boundValue(after)}
}

// secretField reports whether the field at path holds a secret: a key, a hash of one, a
// shared or private key, a password or a token.
func secretField(path string) bool {
	name := path[strings.LastIndexByte(path, '.')+1:]
	switch name {
	case "key", "hash", "k", "d":
		return true
	}
	for _, s := range []string{"secret", "password", "private", "token", "_hash", "api_key", "credential"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// boundValue keeps v when it is short; a longer string keeps its start, anything else
// becomes a note of its size.
func boundValue(v json.RawMessage) json.RawMessage {
	if len(v) <= MaxAuditValueBytes {
		return v
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		cut := MaxAuditValueBytes / 2
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		v, _ = json.Marshal(fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s)))
		return v
	}
	v, _ = json.Marshal(fmt.Sprintf("(%d bytes of JSON)", len(v)))
	return v
}

// Bound cuts c until its JSON fits MaxAuditChangesBytes, and says so in Truncated: the
// fields of updated objects go first (their names stay), then objects from the end of
// each list, then an update's fields beyond the first ones in path order.
func (c *AuditChanges) Bound() {
	fits := func() bool {
		b, err := json.Marshal(c)
		return err == nil && len(b) <= MaxAuditChangesBytes
	}
	if fits() {
		return
	}
	c.Truncated = true
	for i := range c.Updated {
		c.Updated[i].Fields = nil
	}
	for !fits() {
		switch {
		case len(c.Created) > 0 && len(c.Created) >= len(c.Updated) && len(c.Created) >= len(c.Deleted):
			c.Created = c.Created[:len(c.Created)*3/4]
		case len(c.Updated) > 0 && len(c.Updated) >= len(c.Deleted):
			c.Updated = c.Updated[:len(c.Updated)*3/4]
		case len(c.Deleted) > 0:
			c.Deleted = c.Deleted[:len(c.Deleted)*3/4]
		case len(c.Fields) > 0:
			paths := slices.Sorted(maps.Keys(c.Fields))
			for _, p := range paths[len(paths)*3/4:] {
				delete(c.Fields, p)
			}
		default:
			return
		}
	}
}
