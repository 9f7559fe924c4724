// Package jsonspec writes a config object as its jsonb column holds it. It knows JSON and
// struct tags only, nothing of the store.
package jsonspec

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The config objects keep what a client sets in one jsonb column (spec; a plan's is
// limits) and their identity, name, version and timestamps in columns of their own. The
// jsonb holds the domain type's own JSON (tenants.Route's: the names of the API and of
// the config entries) less the read-only fields and those with a column: a new field of
// a route is stored and loaded with no change here, and rows written before it load
// with the field's zero value.

// Spec is a config object as its jsonb column holds it: value's JSON without its
// read-only members and those named in columns.
type Spec struct {
	value   any
	columns []string
}

// Of is v's spec, less the members named in columns.
func Of(v any, columns ...string) Spec { return Spec{value: v, columns: columns} }

// MarshalJSON writes the spec's members.
func (s Spec) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(s.value)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, name := range ReadOnlyNames(reflect.TypeOf(s.value)) {
		delete(m, name)
	}
	for _, name := range s.columns {
		delete(m, name)
	}
	return json.Marshal(m)
}

var readOnlyCache sync.Map // reflect.Type → []string

// ReadOnlyNames lists the JSON names of t's fields tagged readonly (id, version…).
func ReadOnlyNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if names, ok := readOnlyCache.Load(t); ok {
		return names.([]string)
	}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Tag.Get("readonly") == "true" {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			names = append(names, name)
		}
	}
	names = slices.Clip(names) // callers append to it: never into the shared array
	readOnlyCache.Store(t, names)
	return names
}
