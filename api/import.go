package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/openapiimport"
)

// OpenAPI import: POST /v1/tenants/{slug}/routes:import makes a route of each path of the
// tenant's OpenAPI document (tenants/openapiimport converts). The routes are written as a
// config document holding only them (tenants.ConfigService.ApplyConfig), so the whole
// import is one transaction, validated and limited as any route write, with one audit
// entry. An import owns the routes named after its document (openapi:<api>:<path>):
// importing again updates those, reports those whose paths the document dropped, and
// with prune deletes them; the tenant's other routes are never touched.

// importBody is the body of POST .../routes:import.
type importBody struct {
	OpenAPI  any              `json:"openapi" required:"true" doc:"The OpenAPI 3.0 or 3.1 document: a JSON object, or a string holding it as JSON or YAML. External $refs are not followed."`
	Upstream tenants.Upstream `json:"upstream" required:"true" doc:"Every imported route's upstream, as a route's."`
	Auth     string           `json:"auth" enum:"none,key,jwt,key_or_jwt" doc:"Every imported route's auth. Default: from the document's security (an X-API-Key header key: key; http bearer, oauth2, openIdConnect: jwt; both offered: key_or_jwt; none: none)."`
	Prefix   *string          `json:"prefix,omitempty" doc:"Put before every path (\"\" for nothing). Default: the path of the document's first server URL."`
	DryRun   bool             `json:"dry_run" doc:"Answer what the import would do, and change nothing."`
	Prune    bool             `json:"prune" doc:"Delete the routes an earlier import of this document made for paths it no longer has. Default: they are kept and listed in stale."`
}

// importedRoute is one route in an import's answer.
type importedRoute struct {
	ID      string   `json:"id,omitempty" doc:"The route's id; absent on a dry run for a route it would create."`
	Name    string   `json:"name"`
	Path    string   `json:"path" doc:"The document's path (for a stale or deleted route, as its name says)."`
	Paths   []string `json:"paths"`
	Methods []string `json:"methods"`
	Auth    string   `json:"auth"`
}

// importResult is what an import did, or, dry, would do.
type importResult struct {
	API       string                  `json:"api" doc:"The document's title as a slug; its routes are named openapi:<api>:<path>."`
	DryRun    bool                    `json:"dry_run"`
	Created   []importedRoute         `json:"created"`
	Updated   []importedRoute         `json:"updated"`
	Unchanged []importedRoute         `json:"unchanged"`
	Stale     []importedRoute         `json:"stale" doc:"Routes an earlier import of this document made for paths it no longer has, kept (import with prune to delete them)."`
	Deleted   []importedRoute         `json:"deleted" doc:"With prune: the stale routes, deleted."`
	Skipped   []openapiimport.Skipped `json:"skipped" doc:"Paths no route was made for, and why."`
	Notes     []openapiimport.Note    `json:"notes" doc:"What the import left out of or changed in the paths it imported (methods the edge does not route, auth that differs between operations)."`
}

// importRetries bounds how often an import is replanned when the tenant's routes change
// between reading them and writing.
const importRetries = 3

func (s *Server) importRoutes(c *fiber.Ctx, r *request) error {
	var b importBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	doc, err := importDocument(c.Body())
	if err != nil {
		return err
	}
	res, err := openapiimport.Convert(doc, openapiimport.Options{Upstream: b.Upstream, Auth: b.Auth, Prefix: b.Prefix})
	if err != nil {
		return err
	}
	svc := s.cfg.Config
	if svc == nil {
		return tenants.Errorf(tenants.ENotFound, "this server does not import routes")
	}
	ctx := s.audited(r.ctx, r, r.tenant.ID, "routes", "import", "")
	for attempt := 1; ; attempt++ {
		out, err := applyImport(ctx, svc, r.tenant.ID, res, &b)
		var e *tenants.Error
		if attempt < importRetries && errors.As(err, &e) && e.Code == tenants.EVersionConflict && e.Field == "revision" {
			continue // another write came between reading the routes and writing them
		}
		if err != nil {
			return importError(err, res)
		}
		return reply(c, http.StatusOK, out, 0)
	}
}

// importDocument is the document the body's openapi holds: the object's own bytes, or
// the string's content.
func importDocument(body []byte) ([]byte, error) {
	var raw struct {
		OpenAPI json.RawMessage `json:"openapi"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, syntaxError(err)
	}
	switch {
	case len(raw.OpenAPI) > 0 && raw.OpenAPI[0] == '{':
		return raw.OpenAPI, nil
	case len(raw.OpenAPI) > 0 && raw.OpenAPI[0] == '"':
		var s string
		if err := json.Unmarshal(raw.OpenAPI, &s); err != nil {
			return nil, syntaxError(err)
		}
		return []byte(s), nil
	}
	e := tenants.Errorf(tenants.EInvalidRequest, "openapi is required: the document as a JSON object, or a string holding JSON or YAML")
	e.Field = "openapi"
	return nil, e
}

// applyImport writes res's routes as a config document of routes only: with prune, the
// document also lists the tenant's routes the import does not own, as they are, so that
// pruning deletes only the stale ones of this import.
func applyImport(ctx context.Context, svc tenants.ConfigService, tenantID string, res *openapiimport.Result, b *importBody) (*importResult, error) {
	cur, err := svc.ExportConfig(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: cur.Tenant, Revision: cur.Revision, Routes: []*tenants.Route{}}
	imported := map[string]openapiimport.Route{}
	for _, ir := range res.Routes {
		rt := *ir.Route
		doc.Routes = append(doc.Routes, &rt)
		imported[rt.Name] = ir
	}
	stored := map[string]*tenants.Route{}
	var stale []*tenants.Route
	for _, rt := range cur.Routes {
		stored[rt.Name] = rt
		switch {
		case !openapiimport.Owns(res.API, rt.Name):
			if b.Prune {
				doc.Routes = append(doc.Routes, rt)
			}
		case imported[rt.Name].Route == nil:
			stale = append(stale, rt)
		}
	}
	plan, err := svc.ApplyConfig(ctx, tenantID, doc, tenants.ApplyOptions{DryRun: b.DryRun, Prune: b.Prune})
	if err != nil {
		return nil, err
	}
	out := &importResult{API: res.API, DryRun: b.DryRun, Created: []importedRoute{}, Updated: []importedRoute{}, Unchanged: []importedRoute{},
		Stale: []importedRoute{}, Deleted: []importedRoute{}, Skipped: res.Skipped, Notes: res.Notes}
	written := map[string]*tenants.Route{}
	for _, rt := range doc.Routes {
		written[rt.Name] = rt
	}
	changed := map[string]bool{}
	for _, ch := range plan.Created {
		if ch.Kind == tenants.ConfigKindRoute {
			out.Created = append(out.Created, describeImported(written[ch.Name], imported[ch.Name].Path, res.API, !b.DryRun))
			changed[ch.Name] = true
		}
	}
	for _, ch := range plan.Updated {
		if ch.Kind == tenants.ConfigKindRoute {
			out.Updated = append(out.Updated, describeImported(written[ch.Name], imported[ch.Name].Path, res.API, true))
			changed[ch.Name] = true
		}
	}
	for _, ir := range res.Routes {
		if !changed[ir.Route.Name] {
			out.Unchanged = append(out.Unchanged, describeImported(stored[ir.Route.Name], ir.Path, res.API, true))
		}
	}
	deleted := map[string]bool{}
	for _, ch := range plan.Deleted {
		if ch.Kind == tenants.ConfigKindRoute {
			out.Deleted = append(out.Deleted, describeImported(stored[ch.Name], "", res.API, true))
			deleted[ch.Name] = true
		}
	}
	for _, rt := range stale {
		if !deleted[rt.Name] {
			out.Stale = append(out.Stale, describeImported(rt, "", res.API, true))
		}
	}
	return out, nil
}

// describeImported is rt as an import's answer lists it; withID leaves out the id a dry run's
// rolled-back create gave it.
func describeImported(rt *tenants.Route, path, api string, withID bool) importedRoute {
	if rt == nil {
		return importedRoute{}
	}
	if path == "" {
		path = strings.TrimPrefix(rt.Name, openapiimport.NamePrefix+api+":")
	}
	d := importedRoute{Name: rt.Name, Path: path, Paths: rt.Paths, Methods: rt.Methods, Auth: rt.Auth}
	if withID {
		d.ID = rt.ID
	}
	return d
}

// routeField is a config document's field of a route: routes[3] or routes[3].upstream….
var routeField = regexp.MustCompile(`^routes\[(\d+)\](?:\.(.*))?$`)

// importError names a route's error as the import's body does: its upstream's fields
// as upstream.…, the rest under the document path the route came from.
func importError(err error, res *openapiimport.Result) error {
	var e *tenants.Error
	if !errors.As(err, &e) {
		return err
	}
	m := routeField.FindStringSubmatch(e.Field)
	if m == nil {
		return err
	}
	i, _ := strconv.Atoi(m[1])
	if i >= len(res.Routes) {
		return err
	}
	c := *e
	switch rest := m[2]; {
	case rest == "upstream" || strings.HasPrefix(rest, "upstream."):
		c.Field = rest
	default:
		c.Field = fmt.Sprintf("openapi.paths[%q]", res.Routes[i].Path)
		c.Message = fmt.Sprintf("route %s (%s): %s", res.Routes[i].Route.Name, strings.Join(res.Routes[i].Route.Paths, ", "), e.Message)
		if rest != "" && !strings.HasPrefix(rest, "paths") {
			c.Field += "." + rest
		}
	}
	return &c
}

// fiberPath escapes what Fiber would read as a parameter: a ':' inside a segment
// (routes:import), as opposed to one starting it (:slug).
func fiberPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ':'); j > 0 {
			segs[i] = s[:j] + `\` + s[j:]
		}
	}
	return strings.Join(segs, "/")
}
