package openapiimport

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"tollgate/tenants"
)

// Apply writes a Result's routes through the tenant's config service, as a config
// document holding only routes, so the whole import is one transaction, each route
// validated and limited as any route write, with one audit entry (ctx's). An import owns
// the routes named after its document (Owns): importing again updates those, reports
// those of paths the document no longer has as stale, and with prune deletes them; the
// tenant's other routes are never touched. Errors name the document path a route came
// from (openapi.paths["/users/{id}"]) or its upstream's field (upstream.targets[0].url).

// ImportedRoute is one route in an import's answer.
type ImportedRoute struct {
	ID      string   `json:"id,omitempty" doc:"The route's id; absent on a dry run for a route it would create."`
	Name    string   `json:"name"`
	Path    string   `json:"path" doc:"The document's path (for a stale or deleted route, as its name says)."`
	Paths   []string `json:"paths"`
	Methods []string `json:"methods"`
	Auth    string   `json:"auth"`
}

// ImportResult is what an import did, or, dry, would do.
type ImportResult struct {
	API       string          `json:"api" doc:"The document's title as a slug; its routes are named openapi:<api>:<path>."`
	DryRun    bool            `json:"dry_run"`
	Created   []ImportedRoute `json:"created"`
	Updated   []ImportedRoute `json:"updated"`
	Unchanged []ImportedRoute `json:"unchanged"`
	Stale     []ImportedRoute `json:"stale" doc:"Routes an earlier import of this document made for paths it no longer has, kept (import with prune to delete them)."`
	Deleted   []ImportedRoute `json:"deleted" doc:"With prune: the stale routes, deleted."`
	Skipped   []Skipped       `json:"skipped" doc:"Paths no route was made for, and why."`
	Notes     []Note          `json:"notes" doc:"What the import left out of or changed in the paths it imported (methods the edge does not route, auth that differs between operations)."`
}

// ApplyOptions modify Apply.
type ApplyOptions struct {
	DryRun bool // answer what the import would do, change nothing
	Prune  bool // delete the stale routes
}

// applyRetries bounds how often an import is replanned when the tenant's routes change
// between reading them and writing.
const applyRetries = 3

// Apply writes res's routes to the tenant and answers what it did (or, dry, would do).
func Apply(ctx context.Context, svc tenants.ConfigService, tenantID string, res *Result, o ApplyOptions) (*ImportResult, error) {
	for attempt := 1; ; attempt++ {
		out, err := apply(ctx, svc, tenantID, res, o)
		var e *tenants.Error
		if attempt < applyRetries && errors.As(err, &e) && e.Code == tenants.EVersionConflict && e.Field == "revision" {
			continue // another write came between reading the routes and writing them
		}
		if err != nil {
			return nil, importError(err, res)
		}
		return out, nil
	}
}

// apply writes res's routes as a config document of routes only: with prune, the
// document also lists the tenant's routes the import does not own, as they are, so that
// pruning deletes only the stale ones of this import.
func apply(ctx context.Context, svc tenants.ConfigService, tenantID string, res *Result, o ApplyOptions) (*ImportResult, error) {
	cur, err := svc.ExportConfig(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: cur.Tenant, Revision: cur.Revision, Routes: []*tenants.Route{}}
	imported := map[string]Route{}
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
		case !Owns(res.API, rt.Name):
			if o.Prune {
				doc.Routes = append(doc.Routes, rt)
			}
		case imported[rt.Name].Route == nil:
			stale = append(stale, rt)
		}
	}
	plan, err := svc.ApplyConfig(ctx, tenantID, doc, tenants.ApplyOptions{DryRun: o.DryRun, Prune: o.Prune})
	if err != nil {
		return nil, err
	}
	out := &ImportResult{API: res.API, DryRun: o.DryRun, Created: []ImportedRoute{}, Updated: []ImportedRoute{}, Unchanged: []ImportedRoute{},
		Stale: []ImportedRoute{}, Deleted: []ImportedRoute{}, Skipped: res.Skipped, Notes: res.Notes}
	written := map[string]*tenants.Route{}
	for _, rt := range doc.Routes {
		written[rt.Name] = rt
	}
	changed := map[string]bool{}
	for _, ch := range plan.Created {
		if ch.Kind == tenants.ConfigKindRoute {
			out.Created = append(out.Created, describeImported(written[ch.Name], imported[ch.Name].Path, res.API, !o.DryRun))
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
func describeImported(rt *tenants.Route, path, api string, withID bool) ImportedRoute {
	if rt == nil {
		return ImportedRoute{}
	}
	if path == "" {
		path = strings.TrimPrefix(rt.Name, NamePrefix+api+":")
	}
	d := ImportedRoute{Name: rt.Name, Path: path, Paths: rt.Paths, Methods: rt.Methods, Auth: rt.Auth}
	if withID {
		d.ID = rt.ID
	}
	return d
}

// routeField is a config document's field of a route: routes[3] or routes[3].upstream….
var routeField = regexp.MustCompile(`^routes\[(\d+)\](?:\.(.*))?$`)

// importError names a route's error as the import's body does: its upstream's fields
// as upstream.…, the rest under the document path the route came from.
func importError(err error, res *Result) error {
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
	case rest == tenants.ResRoutes:
		c.Field = rest // past the plan's routes: the import as a whole, as on POST .../routes
	default:
		c.Field = fmt.Sprintf("openapi.paths[%q]", res.Routes[i].Path)
		c.Message = fmt.Sprintf("route %s (%s): %s", res.Routes[i].Route.Name, strings.Join(res.Routes[i].Route.Paths, ", "), e.Message)
		if rest != "" && !strings.HasPrefix(rest, "paths") {
			c.Field += "." + rest
		}
	}
	return &c
}
