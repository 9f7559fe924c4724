package portal

import (
	"context"
	"errors"
	"html/template"
	"io"
	"net/netip"
	"strings"
	"testing"

	"tollgate/tenants"
)

// shopDoc has the shapes that used to be drawn bare: allOf, arrays of arrays, enums,
// oneOf, a map, and a schema that refers to itself.
const shopDoc = `openapi: 3.0.3
info: {title: Shop, version: "1"}
components:
  schemas:
    Named: {type: object, required: [name], properties: {name: {type: string, description: What it is called}}}
    Pet:
      allOf:
        - $ref: "#/components/schemas/Named"
        - type: object
          required: [kind]
          properties:
            kind: {type: string, enum: [cat, dog, "null"]}
            tags: {type: array, items: {type: array, items: {type: string, format: uuid}}}
            parent: {$ref: "#/components/schemas/Pet"}
            owner: {oneOf: [{type: string}, {$ref: "#/components/schemas/Named"}]}
            extra: {type: object, additionalProperties: {type: integer}}
paths:
  /pets/{petId}:
    get:
      parameters: [{name: petId, in: path, required: true, schema: {type: integer}}]
      responses: {"200": {description: A pet, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}}
  /pets:
    get:
      parameters: [{name: limit, in: query, required: true, schema: {type: integer, example: 10}}]
      responses: {"200": {description: Pets, content: {application/json: {schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}}}}}
    post:
      requestBody: {content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
      responses: {"201": {description: Made}}
`

func route(path string, auth string, methods ...string) *tenants.Route {
	return &tenants.Route{Name: path, Paths: []string{path}, Methods: methods, Auth: auth}
}

func readShop(t *testing.T, routes ...*tenants.Route) *docsView {
	t.Helper()
	d := &docsView{}
	if !readDocument([]byte(shopDoc), d, routeTable(routes)) {
		t.Fatal("the shop document was not read")
	}
	return d
}

// find walks a schema tree for the field at a dotted path ("parent.name").
func field(n *schemaNode, path string) *schemaNode {
	for _, name := range strings.Split(path, ".") {
		var next *schemaNode
		for _, f := range n.Fields {
			if f.Name == name {
				next = f
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

func TestSchemaTree(t *testing.T) {
	d := readShop(t)
	op := findOperation(operationID("GET", "/pets/{petId}"), d.Operations)
	if op == nil || len(op.Responses) != 1 || len(op.Responses[0].Bodies) != 1 {
		t.Fatalf("GET /pets/{petId}: %+v", op)
	}
	pet := op.Responses[0].Bodies[0].Schema
	if pet.Ref != "Pet" || pet.Label != "object" {
		t.Errorf("Pet drawn as %q (ref %q), want an object named Pet", pet.Label, pet.Ref)
	}
	// allOf: the fields of both parts, each part's required ones marked.
	for name, required := range map[string]bool{"name": true, "kind": true, "tags": false, "parent": false, "owner": false, "extra": false} {
		f := field(pet, name)
		if f == nil {
			t.Errorf("allOf: field %s missing", name)
			continue
		}
		if f.Required != required {
			t.Errorf("field %s required = %v, want %v", name, f.Required, required)
		}
	}
	if f := field(pet, "name"); f != nil && f.About != "What it is called" {
		t.Errorf("name's description %q", f.About)
	}
	if f := field(pet, "kind"); f == nil || strings.Join(f.Enum, ",") != `"cat","dog","null"` {
		t.Errorf("enum values: %+v", f)
	}
	tags := field(pet, "tags")
	if tags == nil || tags.Label != "array of array of string (uuid)" || tags.Items == nil || tags.Items.Items == nil || tags.Items.Items.Label != "string (uuid)" {
		t.Errorf("array of arrays drawn as %+v", tags)
	}
	// The self-reference is named and not followed.
	if parent := field(pet, "parent"); parent == nil || !parent.Cycle || parent.Ref != "Pet" || len(parent.Fields) != 0 {
		t.Errorf("parent (a $ref to Pet inside Pet): %+v", parent)
	}
	owner := field(pet, "owner")
	if owner == nil || owner.Choice != "One of" || len(owner.Variants) != 2 || owner.Variants[1].Ref != "Named" || owner.Label != "one of 2" {
		t.Errorf("oneOf: %+v", owner)
	}
	if extra := field(pet, "extra"); extra == nil || extra.Values == nil || extra.Values.Label != "integer" {
		t.Errorf("a map's values: %+v", extra)
	}
	list := findOperation(operationID("GET", "/pets"), d.Operations).Responses[0].Bodies[0].Schema
	if list.Label != "array of Pet" || list.Items == nil || field(list.Items, "kind") == nil {
		t.Errorf("an array of Pet: %+v", list)
	}
	// The drawing: the template runs over the whole tree.
	tmpl := template.Must(template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/schema.html"))
	var b strings.Builder
	if err := tmpl.ExecuteTemplate(&b, "operation-detail", op); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<span class="type">array of array of string (uuid)</span>`, `One of: <code>&#34;cat&#34;</code>`,
		`refers back to Pet above`, `One of:<ol>`, `<code class="name">kind</code> <span class="req">required</span>`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the drawing lacks %s:\n%s", want, b.String())
		}
	}
	// The request body's example is built from the merged schema: required fields only.
	post := findOperation(operationID("POST", "/pets"), d.Operations)
	if post.BodyMedia != "application/json" || compactJSON(post.BodyExample) != `{"kind":"cat","name":"string"}` {
		t.Errorf("POST body example %s %s", post.BodyMedia, post.BodyExample)
	}
}

// TestSchemaBounds: a deep chain is cut at maxSchemaDepth, a wide fan-out at
// maxSchemaNodes, and an allOf that includes itself is merged once.
func TestSchemaBounds(t *testing.T) {
	var deep strings.Builder
	deep.WriteString(`{"openapi":"3.0.3","info":{"title":"d","version":"1"},"components":{"schemas":{`)
	for i := range 20 {
		deep.WriteString(`"S` + string(rune('a'+i)) + `":{"type":"object","properties":{"next":{"$ref":"#/components/schemas/S` + string(rune('a'+i+1)) + `"}}},`)
	}
	deep.WriteString(`"S` + string(rune('a'+20)) + `":{"type":"string"},`)
	// W has 12 fields each of type X, which has 12 fields each of type Y...: 12^4 nodes drawn in full.
	for _, n := range []string{"W", "X", "Y", "Z"} {
		next := map[string]string{"W": "X", "X": "Y", "Y": "Z", "Z": "Sa"}[n]
		deep.WriteString(`"` + n + `":{"type":"object","properties":{`)
		for i := range 12 {
			if i > 0 {
				deep.WriteString(",")
			}
			deep.WriteString(`"f` + string(rune('a'+i)) + `":{"$ref":"#/components/schemas/` + next + `"}`)
		}
		deep.WriteString(`}},`)
	}
	deep.WriteString(`"Loop":{"allOf":[{"$ref":"#/components/schemas/Loop"},{"type":"object","properties":{"x":{"type":"string"}}}]}}},`)
	deep.WriteString(`"paths":{"/deep":{"get":{"responses":{"200":{"description":"d","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Sa"}}}}}}},` +
		`"/wide":{"get":{"responses":{"200":{"description":"w","content":{"application/json":{"schema":{"$ref":"#/components/schemas/W"}}}}}}},` +
		`"/loop":{"get":{"responses":{"200":{"description":"l","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Loop"}}}}}}}}}`)
	d := &docsView{}
	if !readDocument([]byte(deep.String()), d, routeTable(nil)) {
		t.Fatal("not read")
	}
	n := findOperation(operationID("GET", "/deep"), d.Operations).Responses[0].Bodies[0].Schema
	depth := 0
	for ; n != nil && !n.Cut; depth++ {
		n = field(n, "next")
	}
	if n == nil || depth != maxSchemaDepth {
		t.Errorf("a chain of 21 schemas is cut at depth %d (node %+v), want %d", depth, n, maxSchemaDepth)
	}
	count := 0
	var walk func(*schemaNode)
	walk = func(n *schemaNode) {
		count++
		for _, f := range n.Fields {
			walk(f)
		}
	}
	walk(findOperation(operationID("GET", "/wide"), d.Operations).Responses[0].Bodies[0].Schema)
	if count > maxSchemaNodes+1 {
		t.Errorf("a fan-out of 12^4 fields draws %d nodes, want at most %d", count, maxSchemaNodes+1)
	}
	loop := findOperation(operationID("GET", "/loop"), d.Operations)
	if loop == nil {
		t.Fatal("/loop not read")
	}
	if s := loop.Responses[0].Bodies[0].Schema; field(s, "x") == nil {
		t.Errorf("an allOf that includes itself: %+v", s)
	}
}

func TestExampleSelection(t *testing.T) {
	const edge = "http://shop.localhost:8000"
	// Nothing served: no example.
	if e := chooseExample(readShop(t).Operations, edge); e != nil {
		t.Errorf("no route, yet an example: %+v", e)
	}
	// Only the parameterised GET is served: its placeholder is in capitals.
	d := readShop(t, route("=/pets/{id}", tenants.AuthKey, "GET"))
	e := chooseExample(d.Operations, edge)
	if e == nil || e.curl("") != "curl -i -H 'X-API-Key: YOUR_KEY' http://shop.localhost:8000/pets/PET_ID" {
		t.Fatalf("example %+v", e)
	}
	// A GET without path parameters wins, with its required query parameter's example.
	d = readShop(t, route("/pets", tenants.AuthNone))
	if got := chooseExample(d.Operations, edge).curl(""); got != "curl -i 'http://shop.localhost:8000/pets?limit=10'" {
		t.Errorf("curl %s", got)
	}
	// Only the POST: its method, a JWT's header and a body from the schema.
	d = readShop(t, route("=/pets", tenants.AuthJWT, "POST"))
	want := `curl -i -X POST -H 'Authorization: Bearer YOUR_TOKEN' -H 'Content-Type: application/json' -d '{"kind":"cat","name":"string"}' http://shop.localhost:8000/pets`
	if got := chooseExample(d.Operations, edge).curl("tg_secret"); got != want {
		t.Errorf("curl\n%s\nwant\n%s", got, want)
	}
	// Without a document, the routes: an exact path with a parameter, a key filled in.
	ops := routeOperations([]*tenants.Route{route("=/users/{user_id}/orders", tenants.AuthKeyOrJWT, "GET"), route("/hello", tenants.AuthKey, "POST")})
	if got := chooseExample(ops, edge).curl("tg_abc"); got != "curl -i -H 'X-API-Key: tg_abc' http://shop.localhost:8000/users/USER_ID/orders" {
		t.Errorf("routes' curl %s", got)
	}
	for in, want := range map[string]string{"orderId": "ORDER_ID", "order-id": "ORDER_ID", "ID": "ID", "x": "X", "": "VALUE", "a.b": "A_B"} {
		if got := placeholder(in); got != want {
			t.Errorf("placeholder(%q) = %q, want %q", in, got, want)
		}
	}
	if got := fillPath("/a/{x}/{y}.json", nil, map[string]string{"x": "a/b c"}); got != "/a/a%2Fb%20c/Y.json" {
		t.Errorf("fillPath %s", got)
	}
}

// TestRelayDialsOnlyTheEdge: the relay's dialer refuses every address but the tenant's
// edge host and port, and addresses the rules forbid.
func TestRelayDialsOnlyTheEdge(t *testing.T) {
	p := &Portal{cfg: Config{EdgeDomain: "edge.example", EdgePort: "8000"}}
	for _, addr := range []string{"evil.example:8000", "shop.edge.example:22", "edge.example:8000", "a.b.edge.example:8000",
		"-x.edge.example:8000", "169.254.169.254:80", "shop.edge.example.evil:8000"} {
		if _, err := p.dialEdge(context.Background(), "tcp", addr); !errors.Is(err, errRelayTarget) {
			t.Errorf("dial %s: %v, want the relay's refusal", addr, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1": false, "::1": false, "169.254.169.254": false, "fe80::1": false,
		"0.0.0.0": false, "224.0.0.1": false, "10.0.0.7": true, "203.0.113.9": true} {
		if got := relayAddrAllowed(netip.MustParseAddr(addr), false); got != want {
			t.Errorf("address %s allowed = %v, want %v", addr, got, want)
		}
	}
	if !relayAddrAllowed(netip.MustParseAddr("127.0.0.1"), true) {
		t.Error("a localhost edge is refused its loopback address")
	}
	p.cfg.EdgePublicURL = "https://api.example.com"
	if h, port, lo := p.edgeTarget(); h != "api.example.com" || port != "443" || lo {
		t.Errorf("public URL target %s %s %v", h, port, lo)
	}
}

// FuzzReadDocument: any bytes as the tenant's document are read, or refused, without a
// panic; every schema drawn stays within the bounds (depth, nodes) and the drawing runs.
// The seeds (testdata/fuzz/FuzzReadDocument) include schemas that refer to themselves
// through properties, items, allOf and oneOf, a fan-out that grows exponentially, and a
// document in YAML.
func FuzzReadDocument(f *testing.F) {
	f.Add([]byte(shopDoc))
	tmpl := template.Must(template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/schema.html"))
	table := routeTable([]*tenants.Route{route("/", tenants.AuthKey)})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 64<<10 {
			return
		}
		d := &docsView{}
		if !readDocument(raw, d, table) {
			return
		}
		if len(d.Operations) > maxOperations {
			t.Fatalf("%d operations", len(d.Operations))
		}
		for _, o := range d.Operations {
			nodes := 0
			var walk func(n *schemaNode, depth int)
			walk = func(n *schemaNode, depth int) {
				if n == nil {
					return
				}
				nodes++
				if depth > maxSchemaDepth {
					t.Fatalf("%s %s: a schema drawn %d deep", o.Method, o.Path, depth)
				}
				for _, c := range n.Fields {
					walk(c, depth+1)
				}
				for _, c := range n.Variants {
					walk(c, depth+1)
				}
				walk(n.Items, depth+1)
				walk(n.Values, depth+1)
			}
			for _, p := range o.Params {
				walk(p.Schema, 0)
			}
			for _, b := range o.Request {
				walk(b.Schema, 0)
			}
			for _, r := range o.Responses {
				for _, b := range r.Bodies {
					walk(b.Schema, 0)
				}
			}
			if nodes > 2*maxSchemaNodes {
				t.Fatalf("%s %s: %d schema nodes drawn", o.Method, o.Path, nodes)
			}
			if err := tmpl.ExecuteTemplate(io.Discard, "operation-detail", o); err != nil {
				t.Fatalf("%s %s: %v", o.Method, o.Path, err)
			}
			if o.Route != nil {
				_ = newExample(o, "http://t.localhost:8000").curl("")
			}
		}
	})
}
