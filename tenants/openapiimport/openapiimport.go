// Package openapiimport turns a tenant's OpenAPI document into the routes that serve it:
// one route per path of the document, answering that path exactly with the methods of its
// operations and the auth its security asks for. Convert is pure: it reads bytes and
// returns routes, and must not fetch anything (the document's external $refs are
// refused). Apply writes them through the tenants.ConfigService it is given, so the API
// (api/import.go) and the console (web/import.go) import alike; it must not reach past
// that interface.
//
// kin-openapi parses and validates the document. OpenAPI 3.0 is read fully; 3.1 and 3.2
// documents are read as far as kin-openapi reads them, which covers everything used here
// (paths, operations, security, servers), and a document it refuses is refused with its
// message.
package openapiimport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"sigs.k8s.io/yaml"

	"tollgate/tenants"
)

// NamePrefix starts the name of every route an import makes; the part after it up to the
// next ':' is the document's API (APIName), so an import owns exactly the routes named
// NamePrefix+API+":" and leaves the tenant's others alone.
const NamePrefix = "openapi:"

// Options say what the document does not: where the routes send traffic, and optionally
// their auth and base path.
type Options struct {
	// Upstream is every imported route's upstream.
	Upstream tenants.Upstream
	// Auth, when set, is every route's auth; empty derives it from the document's
	// security.
	Auth string
	// Prefix, when set, goes before every path ("" or "/" for none); nil takes the path
	// of the document's first server URL.
	Prefix *string
}

// Route is one imported route and the document path it came from.
type Route struct {
	Path  string
	Route *tenants.Route
}

// Skipped is a document path no route is made for, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Note is something the import changed or left out of a path it did import.
type Note struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Result is a document's routes, sorted by name, with what was left out.
type Result struct {
	// API names the document (its title, as a slug): the routes are named
	// NamePrefix+API+":"+path.
	API     string
	Base    string // the path put before every document path; "" for none
	Routes  []Route
	Skipped []Skipped
	Notes   []Note
}

// Owns reports whether the route named name was made by an import of the document API.
func Owns(api, name string) bool {
	return strings.HasPrefix(name, NamePrefix+api+":")
}

// Convert parses and validates doc (JSON or YAML) and returns its routes. Errors are
// tenants.EValidation with the field under "openapi" (openapi.paths["/a"].get) or naming
// the option at fault (prefix, auth); the routes themselves are validated by the store,
// as any route is.
func Convert(doc []byte, o Options) (res *Result, err error) {
	switch o.Auth {
	case "", tenants.AuthNone, tenants.AuthKey, tenants.AuthJWT, tenants.AuthKeyOrJWT:
	default:
		return nil, tenants.Invalid("auth", "must be one of none, key, jwt, key_or_jwt; got %q", o.Auth)
	}
	t, err := load(doc)
	if err != nil {
		return nil, err
	}
	base, err := basePath(t, o.Prefix)
	if err != nil {
		return nil, err
	}
	res = &Result{API: apiName(t), Base: base, Routes: []Route{}, Skipped: []Skipped{}, Notes: []Note{}}
	if t.Paths == nil || t.Paths.Len() == 0 {
		return nil, tenants.Invalid("openapi.paths", "the document has no paths to import")
	}
	if len(t.Webhooks) > 0 {
		res.Notes = append(res.Notes, Note{Path: "", Message: "webhooks are calls the API makes, not routes: left out"})
	}
	for _, p := range sortedPaths(t.Paths) {
		r, reason, notes := convertPath(t, p, t.Paths.Value(p), base, o)
		res.Notes = append(res.Notes, notes...)
		if reason != "" {
			res.Skipped = append(res.Skipped, Skipped{Path: p, Reason: reason})
			continue
		}
		r.Name = routeName(res.API, p)
		res.Routes = append(res.Routes, Route{Path: p, Route: r})
	}
	slices.SortFunc(res.Routes, func(a, b Route) int { return strings.Compare(a.Route.Name, b.Route.Name) })
	return res, nil
}

// load parses and validates the document. kin-openapi is given untrusted bytes, so a
// panic in it is this document's error rather than the server's.
func load(doc []byte) (t *openapi3.T, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, tenants.Invalid("openapi", "the document could not be read: %v", p)
		}
	}()
	loader := openapi3.NewLoader() // external $refs stay refused: no file or URL is read
	loader.Context = context.Background()
	t, err = loader.LoadFromData(doc)
	if err != nil {
		return nil, tenants.Invalid("openapi", "is not an OpenAPI document: %s", err)
	}
	if t.OpenAPIMajorMinor() == "" {
		var head struct {
			Swagger any `json:"swagger"`
		}
		if yaml.Unmarshal(doc, &head) == nil && head.Swagger != nil {
			return nil, tenants.Invalid("openapi", "Swagger 2.0 documents are not read: convert the document to OpenAPI 3")
		}
		if t.OpenAPI == "" {
			return nil, tenants.Invalid("openapi.openapi", "is required: the document's OpenAPI version (3.0.x or 3.1.x)")
		}
		return nil, tenants.Invalid("openapi.openapi", "must be an OpenAPI 3 version (3.0.x, 3.1.x), got %q", t.OpenAPI)
	}
	// Examples do not change what a route serves; a document with a stale one still
	// describes its paths.
	if err := t.Validate(loader.Context, openapi3.DisableExamplesValidation()); err != nil {
		return nil, tenants.Invalid(fieldOf(err), "%s", err)
	}
	return t, nil
}

// fieldOf is where in the document a validation error is, from kin-openapi's context
// wrappers: openapi.paths["/users/{id}"].get.
func fieldOf(err error) string {
	var b strings.Builder
	b.WriteString("openapi")
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch c := e.(type) {
		case *openapi3.SectionValidationError:
			b.WriteString("." + strings.ReplaceAll(c.Section, " ", ""))
		case *openapi3.PathValidationError:
			fmt.Fprintf(&b, "[%q]", c.Path)
		case *openapi3.OperationValidationError:
			b.WriteString("." + strings.ToLower(c.Method))
		case *openapi3.ComponentValidationError:
			list := componentLists[c.Section]
			if list == "" {
				list = c.Section
			}
			fmt.Fprintf(&b, ".%s[%q]", list, c.Name)
		case *openapi3.WebhookValidationError:
			fmt.Fprintf(&b, "[%q]", c.Name)
		case *openapi3.ParameterFieldValidationError:
			fmt.Fprintf(&b, ".parameters[%q].%s", c.ParameterName, c.Field)
		}
	}
	return b.String()
}

// componentLists are the document's names of the components kin-openapi's errors name
// in the singular.
var componentLists = map[string]string{
	"schema": "schemas", "parameter": "parameters", "request body": "requestBodies", "response": "responses",
	"header": "headers", "security scheme": "securitySchemes", "example": "examples", "link": "links", "callback": "callbacks",
}

// basePath is the path put before every document path: the prefix asked for, or the
// path of the first server URL (its variables at their defaults), without a trailing
// slash.
func basePath(t *openapi3.T, prefix *string) (string, error) {
	field, raw := "prefix", ""
	if prefix != nil {
		raw = *prefix
	} else if len(t.Servers) > 0 && t.Servers[0] != nil {
		field = "openapi.servers[0].url"
		bp, err := t.Servers[0].BasePath()
		if err != nil {
			return "", tenants.Invalid(field, "has no path the edge can serve: %s", err)
		}
		u, _ := url.PathUnescape(bp)
		raw = u
	}
	raw = strings.TrimSuffix(raw, "/")
	if raw == "" {
		return "", nil
	}
	if err := tenants.ValidatePath(raw); err != nil {
		return "", tenants.Invalid(field, "base path %q: %v", raw, err)
	}
	return raw, nil
}

// apiName is the document's title as a slug, the part of its routes' names that tells
// its imports from another document's: "Pet Store" → pet-store.
func apiName(t *openapi3.T) string {
	title := ""
	if t.Info != nil {
		title = strings.ToLower(t.Info.Title)
	}
	var b strings.Builder
	dash := false
	for _, c := range title {
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
			dash = false
		default:
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	if b.Len() == 0 {
		return "api"
	}
	return b.String()
}

// maxName is tenants.ValidateName's limit.
const maxName = 100

// routeName names the route of path: NamePrefix+api+":"+path, the path's end cut and
// replaced by a hash of it when that is too long, so the name stays the same for the
// same path and differs for another.
func routeName(api, path string) string {
	name := NamePrefix + api + ":" + path
	if utf8.RuneCountInString(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(path))
	tail := "~" + hex.EncodeToString(sum[:6])
	keep := []rune(name)[:maxName-len(tail)]
	return string(keep) + tail
}

// methods are the edge's methods in the order routes list them; an operation's other
// methods (trace, query, additional operations) are left out and noted.
var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// convertPath makes the route of one document path, or says why it makes none.
func convertPath(t *openapi3.T, p string, item *openapi3.PathItem, base string, o Options) (*tenants.Route, string, []Note) {
	var notes []Note
	routePath, note, reason := edgePath(base, p)
	if reason != "" {
		return nil, reason, nil
	}
	if note != "" {
		notes = append(notes, Note{Path: p, Message: note})
	}
	if item == nil {
		return nil, "the path has no operations", nil
	}
	ops := item.Operations()
	var ms []string
	var other []string
	for m := range ops {
		if u := strings.ToUpper(m); slices.Contains(methods, u) {
			ms = append(ms, u)
		} else {
			other = append(other, u)
		}
	}
	slices.SortFunc(ms, func(a, b string) int { return slices.Index(methods, a) - slices.Index(methods, b) })
	slices.Sort(other)
	if len(other) > 0 {
		notes = append(notes, Note{Path: p, Message: fmt.Sprintf("%s: not a method the edge routes, left out", strings.Join(other, ", "))})
	}
	if len(ms) == 0 {
		if len(other) > 0 {
			return nil, "none of its operations uses a method the edge routes (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)", notes
		}
		return nil, "the path has no operations", notes
	}
	auth := o.Auth
	if auth == "" {
		var why string
		auth, why, notes = pathAuth(t, p, item, ms, notes)
		if why != "" {
			return nil, why, notes
		}
	}
	up, err := copyUpstream(o.Upstream)
	if err != nil {
		return nil, err.Error(), notes
	}
	return &tenants.Route{Paths: []string{routePath}, Methods: ms, Upstream: up, Auth: auth}, "", notes
}

// copyUpstream gives each route an upstream of its own: validation normalizes it in place.
func copyUpstream(u tenants.Upstream) (tenants.Upstream, error) {
	var c tenants.Upstream
	raw, err := json.Marshal(u)
	if err == nil {
		err = json.Unmarshal(raw, &c)
	}
	return c, err
}

// edgePath is the route path serving document path p under base: exact, each {param}
// segment kept as the edge's path parameter (tenants.ValidatePath), or why there is none.
// A parameter's name is the edge's when it has other characters than letters, digits
// and '_': they become '_', and the note says so.
func edgePath(base, p string) (path, note, why string) {
	if !strings.HasPrefix(p, "/") {
		return "", "", "a path must start with /"
	}
	full := base + p
	if base != "" && p == "/" {
		full = base
	}
	segs := strings.Split(full, "/")
	var renamed []string
	for i, s := range segs {
		if len(s) < 3 || s[0] != '{' || s[len(s)-1] != '}' {
			continue
		}
		name := []byte(s[1 : len(s)-1])
		for k, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
				name[k] = '_'
			}
		}
		if seg := "{" + string(name) + "}"; seg != s {
			segs[i] = seg
			renamed = append(renamed, s+" is "+seg)
		}
	}
	full = strings.Join(segs, "/")
	if err := tenants.ValidatePath("=" + full); err != nil {
		return "", "", fmt.Sprintf("the route path =%s %v", full, err)
	}
	if len(renamed) > 0 {
		note = "path parameters take letters, digits and '_': " + strings.Join(renamed, ", ")
	}
	return "=" + full, note, ""
}

func sortedPaths(ps *openapi3.Paths) []string {
	keys := make([]string, 0, ps.Len())
	for k := range ps.Map() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
