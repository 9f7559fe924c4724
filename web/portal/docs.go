package portal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	neturl "net/url"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gofiber/fiber/v2"

	"tollgate/edge/routing"
	"tollgate/tenants"
)

// The docs: the operations of the OpenAPI document the tenant last imported its routes
// from, or, without one, the tenant's routes, each checked against the routes the edges
// serve; with the edge's base URL and a curl line that calls one of them.

const (
	// maxOperations bounds the operations one document shows (the rest are counted).
	maxOperations = 500
	// drawnOperations are drawn in full on the docs page; the others are a line each,
	// with their own page.
	drawnOperations = 20
	maxRoutes       = 1000
)

type docsView struct {
	EdgeURL    string
	Title      string
	Version    string
	About      string
	Operations []*operation
	FromRoutes bool // no document: the operations are the routes
	Left       int  // operations past maxOperations, not shown
	Unserved   int  // operations of the document no route serves
	Example    *example
	Curl       string // "" when no route serves anything
	Drawn      int
	routeOps   []*operation // the routes' operations, when the example had to be one of them
}

type operation struct {
	ID, Method, Path, Summary, About string
	Params                           []param
	Request                          []schemaDoc
	Responses                        []response
	// Route is the tenant's route that serves the operation; nil when none does (the
	// page says so and offers no example or try-it).
	Route       *tenants.Route
	AnyMethod   bool // a route of no methods: it answers every one
	Prefix      bool // a route path that also answers the paths below it
	BodyMedia   string
	BodyExample string
}

type param struct {
	Name, In, About string
	Required        bool
	Schema          *schemaNode
	Example         string
}

type schemaDoc struct {
	Media  string
	Schema *schemaNode
}

type response struct {
	Status, About string
	Bodies        []schemaDoc
}

// bodyMethods carry a request body in the examples and the try-it form.
func bodyMethod(m string) bool { return m == "POST" || m == "PUT" || m == "PATCH" }

func (p *Portal) docsPage(ctx *fiber.Ctx) error {
	v := viewOf(ctx)
	d, err := p.apiDocs(p.ctx(ctx), v.Tenant)
	if err != nil {
		return p.internal(ctx, err)
	}
	d.Drawn = min(len(d.Operations), drawnOperations)
	return p.render(ctx, http.StatusOK, "docs", page{Title: "API documentation", Nav: "docs", Data: d})
}

// apiDocs reads the tenant's document (or its routes) and picks the example.
func (p *Portal) apiDocs(ctx context.Context, t *tenants.Tenant) (*docsView, error) {
	d := &docsView{EdgeURL: p.edgeURL(t.Slug)}
	routes, err := p.allRoutes(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	table := routeTable(routes)
	raw, err := p.cfg.Portals.FindAPIDoc(ctx, t.ID)
	switch {
	case err == nil:
		if !readDocument(raw, d, table) {
			d.Operations, d.Left, d.Unserved = routeOperations(routes), 0, 0
			d.FromRoutes = true
		}
	case tenants.ErrorCode(err) == tenants.ENotFound:
		d.Operations, d.FromRoutes = routeOperations(routes), true
	default:
		return nil, err
	}
	d.Example = chooseExample(d.Operations, d.EdgeURL)
	if d.Example == nil && !d.FromRoutes {
		// The document describes none of what the routes serve (routes made by hand,
		// or the document of an earlier import): the example calls a route instead,
		// whose page the document's operations then do not hold.
		d.routeOps = routeOperations(routes)
		d.Example = chooseExample(d.routeOps, d.EdgeURL)
	}
	if d.Example != nil {
		d.Curl = d.Example.curl("")
	}
	return d, nil
}

func (p *Portal) allRoutes(ctx context.Context, tenantID string) ([]*tenants.Route, error) {
	var all []*tenants.Route
	cursor := ""
	for {
		rs, next, err := p.cfg.Routes.ListRoutes(ctx, tenantID, tenants.Page{Limit: tenants.MaxPageLimit, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
		if next == "" || len(all) >= maxRoutes {
			return all, nil
		}
		cursor = next
	}
}

// routeTable is the edge's own table of the routes: an operation is served when the
// edge's lookup would find a route for its method and (filled) path.
func routeTable(routes []*tenants.Route) *routing.Table[tenants.Route] {
	t := &routing.Table[tenants.Route]{}
	for _, r := range routes {
		for _, path := range r.Paths {
			if tenants.ValidatePath(path) == nil {
				t.Add(path, r.Methods, r)
			}
		}
	}
	return t
}

// served is the route the edge would pick for method and path (a path to the edge, its
// parameters filled); nil when none, or when the edge would refuse the path itself.
func served(t *routing.Table[tenants.Route], method, path string) *tenants.Route {
	norm, err := routing.NormalizePath(nil, []byte(path))
	if err != nil {
		return nil
	}
	r, _ := t.Lookup([]byte(method), norm)
	return r
}

func operationID(method, path string) string {
	sum := sha256.Sum256([]byte(method + " " + path))
	return hex.EncodeToString(sum[:6])
}

// readDocument fills d from an OpenAPI document; false when it cannot be read (then the
// routes stand in for it). kin-openapi reads the tenant's bytes, so a panic in it is a
// document that cannot be read, not a page that fails.
func readDocument(raw []byte, d *docsView, table *routing.Table[tenants.Route]) (ok bool) {
	defer func() {
		if recover() != nil {
			d.Operations, ok = nil, false
		}
	}()
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
		if item == nil {
			continue
		}
		for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
			op := item.GetOperation(method)
			if op == nil {
				continue
			}
			if len(d.Operations) == maxOperations {
				d.Left++
				continue
			}
			o := describe(method, prefix+path, item, op)
			o.Route = served(table, method, fillPath(o.Path, o.Params, nil))
			if o.Route == nil && prefix != "" {
				// The import may have been told another prefix than the server's.
				if r := served(table, method, fillPath(path, o.Params, nil)); r != nil {
					o.Path, o.ID, o.Route = path, operationID(method, path), r
				}
			}
			if o.Route == nil {
				d.Unserved++
			}
			d.Operations = append(d.Operations, o)
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

func describe(method, path string, item *openapi3.PathItem, op *openapi3.Operation) *operation {
	o := &operation{ID: operationID(method, path), Method: method, Path: path, Summary: op.Summary, About: op.Description}
	w := &schemaWalk{}
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil || len(o.Params) >= 64 {
				continue
			}
			pr := ref.Value
			o.Params = append(o.Params, param{Name: pr.Name, In: pr.In, Required: pr.Required || pr.In == "path", About: pr.Description,
				Schema: w.render(pr.Schema), Example: paramExample(pr)})
		}
	}
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		c := op.RequestBody.Value.Content
		o.Request = w.bodies(c)
		for _, m := range sortedMedia(c) {
			if o.BodyMedia == "" || strings.Contains(m, "json") && !strings.Contains(o.BodyMedia, "json") {
				o.BodyMedia = m
				o.BodyExample = bodyExample(c[m])
			}
		}
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
			o.Responses = append(o.Responses, response{Status: code, About: about, Bodies: w.bodies(r.Value.Content)})
		}
	}
	return o
}

// render draws one schema of an operation; the operation's schemas share the node bound.
func (w *schemaWalk) render(ref *openapi3.SchemaRef) *schemaNode {
	if ref == nil || ref.Value == nil {
		return nil
	}
	w.open = w.open[:0]
	return w.node(ref, 0)
}

func sortedMedia(c openapi3.Content) []string {
	media := make([]string, 0, len(c))
	for m := range c {
		media = append(media, m)
	}
	sort.Strings(media)
	return media
}

func (w *schemaWalk) bodies(c openapi3.Content) []schemaDoc {
	out := []schemaDoc{}
	for _, m := range sortedMedia(c) {
		if mt := c[m]; mt != nil {
			out = append(out, schemaDoc{Media: m, Schema: w.render(mt.Schema)})
		}
	}
	return out
}

func bodyExample(mt *openapi3.MediaType) string {
	if mt == nil {
		return ""
	}
	if mt.Example != nil {
		return jsonText(mt.Example)
	}
	return exampleJSON(mt.Schema)
}

// paramExample is the value a parameter's example shows: the document's example, else
// its schema's example, first enum value or default; "" for none (the example then
// writes a placeholder).
func paramExample(pr *openapi3.Parameter) string {
	vals := []any{pr.Example}
	if s := pr.Schema; s != nil && s.Value != nil {
		vals = append(vals, s.Value.Example)
		if len(s.Value.Enum) > 0 {
			vals = append(vals, s.Value.Enum[0])
		}
		vals = append(vals, s.Value.Default)
	}
	for _, v := range vals {
		switch x := v.(type) {
		case nil:
		case string:
			if x != "" {
				return x
			}
		default:
			if t := jsonText(x); t != "null" {
				return t
			}
		}
	}
	return ""
}

// routeOperations are the routes as operations, for a tenant without a document: one
// per path and method (GET for a route of every method).
func routeOperations(routes []*tenants.Route) []*operation {
	var ops []*operation
	for _, r := range routes {
		methods := r.Methods
		if len(methods) == 0 {
			methods = []string{"GET"}
		}
		for _, raw := range r.Paths {
			path := strings.TrimPrefix(raw, "=")
			var params []param
			for _, seg := range strings.Split(path, "/") {
				if name, ok := strings.CutPrefix(seg, "{"); ok && strings.HasSuffix(name, "}") {
					params = append(params, param{Name: strings.TrimSuffix(name, "}"), In: "path", Required: true})
				}
			}
			for _, m := range methods {
				if len(ops) == maxOperations {
					return ops
				}
				o := &operation{ID: operationID(m, path), Method: m, Path: path, Params: params, Route: r,
					AnyMethod: len(r.Methods) == 0, Prefix: !strings.HasPrefix(raw, "=") && path != "/"}
				if bodyMethod(m) {
					o.BodyMedia, o.BodyExample = "application/json", "{}"
				}
				ops = append(ops, o)
			}
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Path < ops[j].Path })
	return ops
}

func findOperation(id string, lists ...[]*operation) *operation {
	for _, ops := range lists {
		for _, o := range ops {
			if o.ID == id {
				return o
			}
		}
	}
	return nil
}
