package portal

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Schemas as the docs draw them: a tree of fields, each with its type, whether it is
// required, its enum values and description; allOf merged into one object, oneOf and
// anyOf listed as alternatives, an array with its items drawn beneath it.
//
// The document is the tenant's, and a consumer's browser draws it, so the walk is
// bounded: a $ref back to a schema already being drawn is named, not followed (the
// loader turns references into pointers, so a recursive schema is a pointer cycle);
// below maxSchemaDepth levels or past maxSchemaNodes nodes a schema is cut with a note.
// The node bound also keeps a document whose every field refers to a wide schema (a
// tree that would grow exponentially with depth) to a page of a few hundred lines.

const (
	maxSchemaDepth = 8
	maxSchemaNodes = 400
	maxEnumValues  = 50
	maxAllOf       = 32 // schemas one allOf may merge, nested ones counted
)

// schemaNode is one schema of the tree drawn by the "schema" template.
type schemaNode struct {
	Name     string // the field's name, in an object
	Required bool
	Label    string // "string (date-time)", "object", "array of Pet", "one of 2"
	Ref      string // the component it is, when it came from a $ref
	About    string
	Enum     []string // JSON values
	MoreEnum int      // values past maxEnumValues, left out
	Default  string
	Nullable bool
	ReadOnly bool
	Fields   []*schemaNode
	Items    *schemaNode
	Choice   string // "One of", "Any of"
	Variants []*schemaNode
	Values   *schemaNode // additionalProperties: a map's values
	Cycle    bool        // a reference to a schema drawn above it
	Cut      bool        // past the depth or size bound
}

type schemaWalk struct {
	nodes int
	open  []*openapi3.Schema // the schemas being drawn, outermost first
}

func refName(ref string) string {
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

func (w *schemaWalk) node(ref *openapi3.SchemaRef, depth int) *schemaNode {
	n := &schemaNode{Label: "any"}
	if ref == nil || ref.Value == nil {
		return n
	}
	n.Ref = refName(ref.Ref)
	s := ref.Value
	w.nodes++
	if slices.Contains(w.open, s) {
		n.Cycle, n.Label = true, "object"
		if n.Ref == "" {
			n.Label = "the schema above"
		}
		return n
	}
	if depth >= maxSchemaDepth || w.nodes > maxSchemaNodes {
		n.Cut = true
		return n
	}
	w.open = append(w.open, s)
	defer func() { w.open = w.open[:len(w.open)-1] }()

	m := merged(s)
	n.About, n.Nullable, n.ReadOnly = m.about, m.nullable, m.readOnly
	if m.def != nil {
		n.Default = jsonText(m.def)
	}
	for i, v := range m.enum {
		if i == maxEnumValues {
			n.MoreEnum = len(m.enum) - i
			break
		}
		n.Enum = append(n.Enum, jsonText(v))
	}
	for _, name := range m.names {
		if w.nodes >= maxSchemaNodes {
			n.Cut = true // the fields left would each be cut: say it once
			break
		}
		f := w.node(m.props[name], depth+1)
		f.Name, f.Required = name, slices.Contains(m.required, name)
		n.Fields = append(n.Fields, f)
	}
	if m.items != nil {
		n.Items = w.node(m.items, depth+1)
	}
	if m.values != nil {
		n.Values = w.node(m.values, depth+1)
	}
	for _, v := range m.variants {
		if w.nodes >= maxSchemaNodes {
			n.Cut = true
			break
		}
		n.Variants = append(n.Variants, w.node(v, depth+1))
	}
	n.Choice = m.choice
	n.Label = m.label(n)
	return n
}

// mergedSchema is a schema with its allOf folded in.
type mergedSchema struct {
	types     []string
	format    string
	about     string
	enum      []any
	def       any
	nullable  bool
	readOnly  bool
	names     []string // of props, sorted
	props     map[string]*openapi3.SchemaRef
	required  []string
	items     *openapi3.SchemaRef
	values    *openapi3.SchemaRef
	choice    string
	variants  openapi3.SchemaRefs
	hasObject bool
}

// merged folds s and every schema its allOf names (recursively, each once) into one:
// the fields of all, required if any requires them (a field two parts define keeps the
// first part's schema), the first type, format, description and enum found, and the
// alternatives of every part.
func merged(s *openapi3.Schema) *mergedSchema {
	m := &mergedSchema{props: map[string]*openapi3.SchemaRef{}}
	seen := map[*openapi3.Schema]bool{}
	var fold func(s *openapi3.Schema)
	fold = func(s *openapi3.Schema) {
		if s == nil || seen[s] || len(seen) >= maxAllOf {
			return
		}
		seen[s] = true
		if len(m.types) == 0 && s.Type != nil {
			m.types = s.Type.Slice()
		}
		if m.format == "" {
			m.format = s.Format
		}
		if m.about == "" {
			m.about = s.Description
			if m.about == "" {
				m.about = s.Title
			}
		}
		if len(m.enum) == 0 {
			m.enum = s.Enum
			if len(m.enum) == 0 && s.Const != nil {
				m.enum = []any{s.Const}
			}
		}
		if m.def == nil {
			m.def = s.Default
		}
		m.nullable = m.nullable || s.Nullable || (s.Type != nil && s.Type.IncludesNull())
		m.readOnly = m.readOnly || s.ReadOnly
		for name, p := range s.Properties {
			if _, dup := m.props[name]; !dup {
				m.props[name] = p
				m.names = append(m.names, name)
			}
		}
		m.hasObject = m.hasObject || len(s.Properties) > 0
		m.required = append(m.required, s.Required...)
		if m.items == nil {
			m.items = s.Items
		}
		if m.values == nil && s.AdditionalProperties.Schema != nil {
			m.values = s.AdditionalProperties.Schema
		}
		switch {
		case len(s.OneOf) > 0 && (m.choice == "" || m.choice == "One of"):
			m.choice, m.variants = "One of", append(m.variants, s.OneOf...)
		case len(s.AnyOf) > 0 && (m.choice == "" || m.choice == "Any of"):
			m.choice, m.variants = "Any of", append(m.variants, s.AnyOf...)
		}
		for _, part := range s.AllOf {
			if part != nil {
				fold(part.Value)
			}
		}
	}
	fold(s)
	sort.Strings(m.names)
	if len(m.variants) > maxSchemaNodes {
		m.variants = m.variants[:maxSchemaNodes]
	}
	return m
}

// label is the one line a node's type is drawn as.
func (m *mergedSchema) label(n *schemaNode) string {
	types := slices.DeleteFunc(slices.Clone(m.types), func(t string) bool { return t == "null" })
	typ := strings.Join(types, " or ")
	switch {
	case typ == "array" || typ == "" && m.items != nil:
		if n.Items == nil {
			return "array"
		}
		of := n.Items.Label
		if n.Items.Ref != "" {
			of = n.Items.Ref
		}
		return "array of " + of
	case typ == "" && (m.hasObject || m.values != nil):
		typ = "object"
	case typ == "" && len(n.Variants) > 0:
		return strings.ToLower(m.choice) + " " + strconv.Itoa(len(n.Variants))
	case typ == "" && len(m.enum) > 0:
		typ = "enum"
	case typ == "":
		typ = "any"
	}
	if m.format != "" {
		typ += " (" + m.format + ")"
	}
	return typ
}

// jsonText writes an enum value or default as JSON ("a" quoted, 1 bare), short.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > 80 {
		return string(b[:77]) + "…"
	}
	return string(b)
}

// exampleJSON is a value that fits the schema, for a request body to start from: the
// schema's own example when it has one, else a value built from its type (the first
// enum value; required fields of an object, or all when none is required), bounded as
// the drawing is.
func exampleJSON(ref *openapi3.SchemaRef) string {
	if ref == nil || ref.Value == nil {
		return "{}"
	}
	budget := maxSchemaNodes
	v := exampleOf(ref.Value, 0, map[*openapi3.Schema]bool{}, &budget)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "{}"
	}
	return string(b)
}

func exampleOf(s *openapi3.Schema, depth int, open map[*openapi3.Schema]bool, budget *int) any {
	*budget--
	if s == nil || open[s] || depth > 4 || *budget < 0 {
		return nil
	}
	open[s] = true
	defer delete(open, s)
	if s.Example != nil {
		return s.Example
	}
	m := merged(s)
	if len(m.enum) > 0 {
		return m.enum[0]
	}
	if m.def != nil {
		return m.def
	}
	if len(m.variants) > 0 && len(m.types) == 0 && !m.hasObject {
		return exampleOf(m.variants[0].Value, depth+1, open, budget)
	}
	typ := ""
	if len(m.types) > 0 {
		typ = m.types[0]
	}
	switch {
	case typ == "array" || typ == "" && m.items != nil:
		if m.items == nil {
			return []any{}
		}
		if v := exampleOf(m.items.Value, depth+1, open, budget); v != nil {
			return []any{v}
		}
		return []any{}
	case typ == "object" || typ == "" && m.hasObject:
		obj := map[string]any{}
		names := m.names
		if len(m.required) > 0 {
			names = m.required
		}
		for _, name := range names {
			if p := m.props[name]; p != nil && p.Value != nil && !p.Value.ReadOnly {
				obj[name] = exampleOf(p.Value, depth+1, open, budget)
			}
		}
		return obj
	case typ == "string":
		return sampleString(m.format)
	case typ == "integer":
		return 1
	case typ == "number":
		return 1.5
	case typ == "boolean":
		return true
	}
	return nil
}

func sampleString(format string) string {
	switch format {
	case "date-time":
		return "2026-12-06T12:00:00Z"
	case "date":
		return "2026-12-06"
	case "uuid":
		return "3fa85f64-5717-4562-b3fc-2c963f66afa6"
	case "email":
		return "dev@example.com"
	case "uri", "url":
		return "https://example.com"
	}
	return "string"
}
