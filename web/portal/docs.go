package portal

import (
	"context"
	"net/http"
	neturl "net/url"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/shellword"
)

// The docs page: the operations of the OpenAPI document the tenant last imported its
// routes from, or, without one, the tenant's routes. Either way with the edge's base URL
// and a curl line to copy.

type docsView struct {
	EdgeURL    string
	Title      string
	Version    string
	About      string
	Operations []operation
	Routes     []routeDoc
	Curl       string
}

type operation struct {
	Method, Path, Summary, About string
	Params                       []param
	Request                      []schemaDoc
	Responses                    []response
	Auth                         bool
}

type param struct {
	Name, In, Type, About string
	Required              bool
}

type schemaDoc struct{ Media, Shape string }

type response struct {
	Status, About string
	Bodies        []schemaDoc
}

type routeDoc struct {
	Methods, Paths []string
	Auth           string
}

func (p *Portal) docsPage(ctx *fiber.Ctx) error {
	v := viewOf(ctx)
	d := docsView{EdgeURL: p.edgeURL(v.Tenant.Slug)}
	raw, err := p.cfg.Portals.FindAPIDoc(p.ctx(ctx), v.Tenant.ID)
	switch {
	case err == nil:
		if ok := readDocument(raw, &d); !ok {
			err = p.listRoutes(p.ctx(ctx), v.Tenant.ID, &d)
		}
	case tenants.ErrorCode(err) == tenants.ENotFound:
		err = p.listRoutes(p.ctx(ctx), v.Tenant.ID, &d)
	}
	if err != nil {
		return p.internal(ctx, err)
	}
	path, auth := "/", false
	if len(d.Operations) > 0 {
		path, auth = d.Operations[0].Path, d.Operations[0].Auth
	} else if len(d.Routes) > 0 {
		path, auth = strings.TrimPrefix(d.Routes[0].Paths[0], "="), d.Routes[0].Auth != tenants.AuthNone
	}
	d.Curl = "curl -i "
	if auth || len(d.Operations) > 0 {
		d.Curl += "-H " + shellword.Quote("X-API-Key: YOUR_KEY") + " "
	}
	d.Curl += shellword.Quote(d.EdgeURL + path)
	return p.render(ctx, http.StatusOK, "docs", page{Title: "API documentation", Nav: "docs", Data: d})
}

// readDocument fills d from an OpenAPI document; false when it cannot be read (then the
// routes stand in for it).
func readDocument(raw []byte, d *docsView) bool {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(raw)
	if err != nil || doc.Paths == nil {
		return false
	}
	if doc.Info != nil {
		d.Title, d.Version, d.About = doc.Info.Title, doc.Info.Version, doc.Info.Description
	}
	prefix := serverPath(doc)
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
			op := item.GetOperation(method)
			if op == nil {
				continue
			}
			d.Operations = append(d.Operations, describe(method, prefix+path, item, op, doc))
		}
	}
	return true
}

// serverPath is the path of the document's first server URL, which an import puts
// before every route's path unless told otherwise: the operations are shown at the
// paths the edge serves them on.
func serverPath(doc *openapi3.T) string {
	if len(doc.Servers) == 0 || doc.Servers[0] == nil || strings.Contains(doc.Servers[0].URL, "{") {
		return ""
	}
	u, err := neturl.Parse(doc.Servers[0].URL)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(u.Path, "/")
}

func describe(method, path string, item *openapi3.PathItem, op *openapi3.Operation, doc *openapi3.T) operation {
	o := operation{Method: method, Path: path, Summary: op.Summary, About: op.Description}
	sec := doc.Security
	if op.Security != nil {
		sec = *op.Security
	}
	o.Auth = len(sec) > 0
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil {
				continue
			}
			pr := ref.Value
			o.Params = append(o.Params, param{Name: pr.Name, In: pr.In, Required: pr.Required, About: pr.Description, Type: shape(pr.Schema, 0)})
		}
	}
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		o.Request = bodies(op.RequestBody.Value.Content)
	}
	if op.Responses != nil {
		codes := make([]string, 0, op.Responses.Len())
		for code := range op.Responses.Map() {
			codes = append(codes, code)
		}
		sort.Strings(codes)
		for _, code := range codes {
			r := op.Responses.Value(code)
			if r == nil || r.Value == nil {
				continue
			}
			about := ""
			if r.Value.Description != nil {
				about = *r.Value.Description
			}
			o.Responses = append(o.Responses, response{Status: code, About: about, Bodies: bodies(r.Value.Content)})
		}
	}
	return o
}

func bodies(c openapi3.Content) []schemaDoc {
	media := make([]string, 0, len(c))
	for m := range c {
		media = append(media, m)
	}
	sort.Strings(media)
	out := make([]schemaDoc, 0, len(media))
	for _, m := range media {
		out = append(out, schemaDoc{Media: m, Shape: shape(c[m].Schema, 0)})
	}
	return out
}

// shape writes a schema briefly: its type, an object's fields, an array's items, two
// levels deep.
func shape(ref *openapi3.SchemaRef, depth int) string {
	if ref == nil || ref.Value == nil {
		return ""
	}
	s := ref.Value
	typ := ""
	if s.Type != nil {
		typ = strings.Join(s.Type.Slice(), "|")
	}
	switch {
	case typ == "array" || s.Items != nil:
		return "[" + shape(s.Items, depth) + "]"
	case len(s.Properties) > 0 && depth < 2:
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		fields := make([]string, 0, len(names))
		for _, n := range names {
			f := n + ": " + shape(s.Properties[n], depth+1)
			for _, r := range s.Required {
				if r == n {
					f += " (required)"
				}
			}
			fields = append(fields, f)
		}
		return "{" + strings.Join(fields, ", ") + "}"
	case typ == "" && len(s.Properties) > 0:
		return "object"
	case s.Format != "":
		return typ + " (" + s.Format + ")"
	}
	return typ
}

func (p *Portal) listRoutes(ctx context.Context, tenantID string, d *docsView) error {
	cursor := ""
	for {
		rs, next, err := p.cfg.Routes.ListRoutes(ctx, tenantID, tenants.Page{Limit: tenants.MaxPageLimit, Cursor: cursor})
		if err != nil {
			return err
		}
		for _, r := range rs {
			methods := r.Methods
			if len(methods) == 0 {
				methods = []string{"any method"}
			}
			auth := r.Auth
			if auth == "" {
				auth = tenants.AuthNone
			}
			d.Routes = append(d.Routes, routeDoc{Methods: methods, Paths: r.Paths, Auth: auth})
		}
		if next == "" || len(d.Routes) >= 1000 {
			return nil
		}
		cursor = next
	}
}
