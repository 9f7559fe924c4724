package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// decodeBody reads a JSON object body into dst, a pointer to a request struct. It is
// strict, so that a typo is an error instead of a silently ignored setting:
//   - the Content-Type must be application/json (or another +json type), in UTF-8;
//   - the body must be exactly one JSON object, with nothing after it;
//   - every key must be a field of dst, spelled exactly (encoding/json alone would accept
//     "NAME" for "name");
//   - every value must have the field's JSON type (integers for integer fields).
//
// Errors are *tenants.Error: EInvalidRequest naming the field as a JSON path with array
// indices ("upstream.targets[0].weight"), EUnsupportedMedia or EBodyTooLarge. An empty
// body is accepted (dst untouched) only when emptyOK.
func decodeBody(contentType string, body []byte, limit int, dst any, emptyOK bool) error {
	if limit > 0 && len(body) > limit {
		return tenants.Errorf(tenants.EBodyTooLarge, "request body is over the limit of %d bytes", limit)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		if emptyOK {
			return nil
		}
		return tenants.Errorf(tenants.EInvalidRequest, "request body is empty: send a JSON object")
	}
	if err := checkContentType(contentType); err != nil {
		return err
	}
	if trimmed[0] != '{' {
		return tenants.Errorf(tenants.EInvalidRequest, "request body must be a JSON object")
	}

	// Pass 1: syntax, trailing data and shape, on a generic decode.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return tenants.Errorf(tenants.EInvalidRequest, "request body has data after the JSON object: send exactly one object")
	}
	if err := checkShape(reflect.TypeOf(dst).Elem(), generic, ""); err != nil {
		return err
	}

	// Pass 2: the typed decode. Pass 1 found every problem it can raise; its errors are
	// mapped anyway in case the two ever disagree.
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ute):
			e := tenants.Errorf(tenants.EInvalidRequest, "%q must be %s", ute.Field, jsonType(ute.Type))
			e.Field = ute.Field
			return e
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.TrimPrefix(err.Error(), "json: unknown field ")
			return tenants.Errorf(tenants.EInvalidRequest, "field %s is not known", name)
		}
		return syntaxError(err)
	}
	return nil
}

func checkContentType(ct string) error {
	if ct == "" {
		return tenants.Errorf(tenants.EUnsupportedMedia, "send the body with Content-Type: application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return tenants.Errorf(tenants.EUnsupportedMedia, "Content-Type %q is malformed: send application/json", ct)
	}
	if mt != fiber.MIMEApplicationJSON && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return tenants.Errorf(tenants.EUnsupportedMedia, "Content-Type must be application/json, got %q", mt)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return tenants.Errorf(tenants.EUnsupportedMedia, "JSON must be UTF-8, got charset %q", cs)
	}
	return nil
}

func syntaxError(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return tenants.Errorf(tenants.EInvalidRequest, "request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return tenants.Errorf(tenants.EInvalidRequest, "request body is not valid JSON: it ends in the middle of a value")
	}
	return tenants.Errorf(tenants.EInvalidRequest, "request body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// checkShape walks a generic JSON value against the Go type it will be decoded into and
// reports the first unknown key or mistyped value with its full path.
func checkShape(t reflect.Type, v any, path string) error {
	if v == nil {
		return nil // null leaves the zero value; the rules then judge it
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func() error {
		name := path
		if name == "" {
			return tenants.Errorf(tenants.EInvalidRequest, "request body must be a JSON object")
		}
		e := tenants.Errorf(tenants.EInvalidRequest, "%q must be %s, not %s", name, jsonType(t), describe(v))
		e.Field = name
		return e
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		fields := jsonFields(t)
		// Visit keys in a stable order so the same body always gets the same error.
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				full := join(path, k)
				e := tenants.Errorf(tenants.EInvalidRequest, "field %q is not known", full)
				for name := range fields {
					if strings.EqualFold(name, k) {
						e.Message += fmt.Sprintf(" (names are case-sensitive: did you mean %q?)", name)
						break
					}
				}
				e.Field = full
				return e
			}
			if err := checkShape(f.Type, obj[k], join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return wrong()
		}
		for i, x := range arr {
			if err := checkShape(t.Elem(), x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong()
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return wrong()
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			e := tenants.Errorf(tenants.EInvalidRequest, "%q must be an integer, not %s", path, n)
			if isIntegerLiteral(string(n)) {
				e.Message = fmt.Sprintf("%q is out of range: %s", path, n)
			}
			e.Field = path
			return e
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			return wrong()
		}
	}
	return nil
}

func isIntegerLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonType names the JSON type a Go type decodes from, with an article.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a JSON value"
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number (" + string(x) + ")"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "null"
}

// jsonField is one member of a JSON object and the Go field it decodes into.
type jsonField struct {
	Name string
	reflect.StructField
	// Opts are the json tag's options ("omitempty").
	Opts string
	// Owner is the struct type that declares the field (an embedded one's for a promoted
	// field).
	Owner reflect.Type
}

// readOnly reports whether the server owns the field (id, version, timestamps…): a
// request body may not set it, as if it were unknown.
func readOnly(f reflect.StructField) bool { return f.Tag.Get("readonly") == "true" }

var fieldCache sync.Map // fieldsKey → []jsonField

type fieldsKey struct {
	t     reflect.Type
	input bool
}

// fieldsOf lists the JSON members of struct type t as encoding/json sees them: fields of
// embedded structs promoted, a shallower field hiding a deeper one of the same name (so
// a body type may embed a domain type and replace one of its members). input leaves
// out the read-only fields: the members a request may send.
func fieldsOf(t reflect.Type, input bool) []jsonField {
	key := fieldsKey{t, input}
	if fs, ok := fieldCache.Load(key); ok {
		return fs.([]jsonField)
	}
	var out []jsonField
	seen := map[string]bool{}
	for level := []reflect.Type{t}; len(level) > 0; {
		var next []reflect.Type
		var found []jsonField
		for _, lt := range level {
			for i := 0; i < lt.NumField(); i++ {
				f := lt.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" {
					continue
				}
				if f.Anonymous && name == "" {
					ft := f.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if ft.Kind() == reflect.Struct {
						next = append(next, ft)
						continue
					}
				}
				if !f.IsExported() {
					continue
				}
				if name == "" {
					name = f.Name
				}
				if !seen[name] {
					found = append(found, jsonField{Name: name, StructField: f, Opts: opts, Owner: lt})
				}
			}
		}
		for _, f := range found {
			seen[f.Name] = true // a read-only field still hides deeper ones of its name
			if !(input && readOnly(f.StructField)) {
				out = append(out, f)
			}
		}
		level = next
	}
	fieldCache.Store(key, out)
	return out
}

// jsonFields maps the names of the members a request may send in a t to their fields.
func jsonFields(t reflect.Type) map[string]jsonField {
	m := map[string]jsonField{}
	for _, f := range fieldsOf(t, true) {
		m[f.Name] = f
	}
	return m
}

// checkQuery refuses query parameters the endpoint does not take, so "?limt=5" is an
// error rather than a silently ignored limit.
func checkQuery(c *fiber.Ctx, allowed []string) error {
	var bad string
	for k := range c.Context().QueryArgs().All() {
		if !slices.Contains(allowed, string(k)) {
			bad = string(k)
			break
		}
	}
	if bad != "" {
		if len(allowed) == 0 {
			return tenants.Errorf(tenants.EInvalidRequest, "query parameter %q is not known: this endpoint takes none", bad)
		}
		return tenants.Errorf(tenants.EInvalidRequest, "query parameter %q is not known: this endpoint takes %s", bad, strings.Join(allowed, ", "))
	}
	return nil
}

// maxCursor bounds the cursor a client may send back: a route search's is a name of up
// to 400 bytes in base64.
const maxCursor = 600

// pageOf reads ?limit=&cursor=.
func pageOf(c *fiber.Ctx) (tenants.Page, error) {
	p := tenants.Page{Limit: tenants.DefaultPageLimit}
	args := c.Context().QueryArgs()
	if args.Has("limit") {
		raw := string(args.Peek("limit"))
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > tenants.MaxPageLimit {
			e := tenants.Errorf(tenants.EInvalidRequest, "limit must be an integer between 1 and %d, got %q", tenants.MaxPageLimit, raw)
			e.Field = "limit"
			return p, e
		}
		p.Limit = n
	}
	p.Cursor = string(args.Peek("cursor"))
	if len(p.Cursor) > maxCursor || !printableASCII(p.Cursor) {
		e := tenants.Errorf(tenants.EInvalidRequest, "cursor is not one this API returned: pass next_cursor back unchanged")
		e.Field = "cursor"
		return p, e
	}
	return p, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// version decides which version a PUT or PATCH is conditional on: the If-Match header
// ("<version>" as sent in ETag, or * for whatever is current) or the body's "version".
// One of them is required, so a blind overwrite is always a deliberate choice (If-Match: *).
// When both are given they must agree. any reports If-Match: *.
func version(c *fiber.Ctx, body *int64) (v int64, any bool, err error) {
	h := strings.TrimSpace(c.Get(fiber.HeaderIfMatch))
	var fromHeader int64
	if h != "" {
		if h == "*" {
			if body != nil {
				return *body, false, checkVersion(*body)
			}
			return 0, true, nil
		}
		raw := strings.TrimSuffix(strings.TrimPrefix(h, `"`), `"`)
		n, perr := strconv.ParseInt(raw, 10, 64)
		if perr != nil || n < 1 || strings.HasPrefix(h, "W/") {
			e := tenants.Errorf(tenants.EInvalidRequest, "If-Match must be the ETag of the object (like %q) or *, got %q", `"1"`, h)
			e.Field = "If-Match"
			return 0, false, e
		}
		fromHeader = n
	}
	switch {
	case body != nil && fromHeader != 0 && *body != fromHeader:
		return 0, false, tenants.Invalid("version", "is %d but If-Match says %d: send one, or make them agree", *body, fromHeader)
	case body != nil:
		return *body, false, checkVersion(*body)
	case fromHeader != 0:
		return fromHeader, false, nil
	}
	return 0, false, tenants.Invalid("version", "is required: send If-Match: \"<version>\" from the ETag you read, or \"version\" in the body (If-Match: * overwrites whatever is current)")
}

func checkVersion(v int64) error {
	if v < 1 {
		return tenants.Invalid("version", "must be a version this API returned (1 or more), got %d", v)
	}
	return nil
}

// setETag marks a response with the object's version.
func setETag(c *fiber.Ctx, v int64) {
	c.Set(fiber.HeaderETag, `"`+strconv.FormatInt(v, 10)+`"`)
}
