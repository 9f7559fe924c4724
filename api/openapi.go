package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"tollgate/api/apidocs"
	"tollgate/tenants"
)

// The OpenAPI 3.1 document is generated from the endpoint table and, by reflection, from
// the very structs the handlers decode and encode: a field added to a body shows up in the
// document without anyone remembering to. Schemas are strict (additionalProperties: false)
// so that tests validating responses against them catch drift in either direction.
//
// A domain type (tenants.Route…) is both a request body and a response, as two schemas:
// its input schema (RouteCreate) leaves out the read-only fields and carries the request
// rules of the required and enum tags; its output schema (Route) has every field, required
// unless omitempty. A domain type inside a body that has no input schema of its own
// (tenants.Canary, tenants.JWK…) is one component shared by requests and responses, so it
// carries descriptions only.

type obj = map[string]any

// schemaNames gives the API's own types their public names, and domain types the name
// of their output schema where it is not the type's.
var schemaNames = map[reflect.Type]string{
	reflect.TypeFor[tenantCreate]():         "TenantCreate",
	reflect.TypeFor[tenantPatch]():          "TenantPatch",
	reflect.TypeFor[routeUpdate]():          "RouteUpdate",
	reflect.TypeFor[planRateBody]():         "PlanRateLimitInput",
	reflect.TypeFor[platformPlanBody]():     "PlatformPlanPut",
	reflect.TypeFor[resourcesBody]():        "PlatformPlanResourcesInput",
	reflect.TypeFor[quotaBody]():            "QuotaInput",
	reflect.TypeFor[consumerUpdate]():       "ConsumerUpdate",
	reflect.TypeFor[planInput]():            "PlanCreate",
	reflect.TypeFor[planUpdate]():           "PlanUpdate",
	reflect.TypeFor[tokenBody]():            "TokenCreate",
	reflect.TypeFor[keyBody]():              "KeyCreate",
	reflect.TypeFor[domainVerifyBody]():     "DomainVerify",
	reflect.TypeFor[createdKey]():           "CreatedKey",
	reflect.TypeFor[createdToken]():         "CreatedToken",
	reflect.TypeFor[jwtIssuerUpdate]():      "JWTIssuerUpdate",
	reflect.TypeFor[tenants.Issuer]():       "JWTIssuer",
	reflect.TypeFor[tenants.ConsumerPlan](): "Plan",
	reflect.TypeFor[tenants.AccessRules]():  "Policy",
	reflect.TypeFor[accessRulesPut]():       "PolicyPut",
	reflect.TypeFor[status]():               "Status",
	reflect.TypeFor[errorBody]():            "Error",
	reflect.TypeFor[errorDetail]():          "ErrorDetail",
}

// inputNames are the names of the domain types' input schemas (domainBody's is the one
// the published document has always had).
var inputNames = map[reflect.Type]string{
	reflect.TypeFor[tenants.Route]():     "RouteCreate",
	reflect.TypeFor[tenants.Upstream]():  "UpstreamInput",
	reflect.TypeFor[tenants.Target]():    "TargetInput",
	reflect.TypeFor[tenants.RateLimit](): "RateLimitInput",
	reflect.TypeFor[tenants.Quota]():     "QuotaInput",
	reflect.TypeFor[tenants.Consumer]():  "ConsumerCreate",
	reflect.TypeFor[tenants.Issuer]():    "JWTIssuerCreate",
	reflect.TypeFor[tenants.Domain]():    "domainBody",
	// The config document holds objects as requests send them, in its responses too.
	reflect.TypeFor[tenants.ConfigDocument](): "ConfigDocument",
	reflect.TypeFor[tenants.ConsumerPlan]():   "PlanInput",
	reflect.TypeFor[tenants.AccessRules]():    "PolicyInput",
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
	domainPkg   = reflect.TypeFor[tenants.Tenant]().PkgPath()
)

// outputFields adds keywords to fields of the domain types in responses: the enums, and
// descriptions where a response says otherwise than the doc tag (written for requests).
var outputFields = map[string]obj{
	"Tenant.version":       {"description": "Bumped by every change; the ETag. Send it back in If-Match."},
	"Tenant.plan":          {"description": "Platform plan capping the whole tenant."},
	"Route.auth":           {"enum": []string{tenants.AuthNone, tenants.AuthKey, tenants.AuthJWT, tenants.AuthKeyOrJWT, tenants.AuthFunction, tenants.AuthExternal}},
	"Route.methods":        {"description": "Empty: every method."},
	"Key.prefix":           {"description": "The key's first characters, to tell keys apart."},
	"Token.prefix":         {"description": "The token's first characters, to tell tokens apart."},
	"Token.role":           {"enum": tenants.TokenRoles},
	"Issuer.hs256_secret":  {"description": "Never present in responses: the secret is write-only."},
	"Consumer.plan":        {"description": "Absent when the consumer has no plan."},
	"Tenant.limits":        {"description": "The platform plan the tenant is on, with its limits (read-only: change the tenant's plan, or the plan)."},
	"PlatformPlan.version": {"description": "Bumped by every change; the ETag. Send it back in If-Match."},
	"Domain.status":        {"enum": []string{tenants.DomainPending, tenants.DomainVerified}},
}

// schemas builds component schemas by reflection.
type schemas struct {
	comps obj
}

// mode is which of a type's schemas is built.
type mode int

const (
	output mode = iota
	input
	shared // a domain type without an input schema, inside a request body
)

func (g *schemas) name(t reflect.Type, m mode) string {
	if n, ok := inputNames[t]; ok && m == input {
		return n
	}
	if n, ok := schemaNames[t]; ok {
		return n
	}
	if strings.HasPrefix(t.Name(), "list[") {
		item := t.Field(0).Type.Elem()
		for item.Kind() == reflect.Pointer {
			item = item.Elem()
		}
		return g.name(item, output) + "List"
	}
	return t.Name()
}

// ref returns the schema of t: a $ref for named structs (building the component the first
// time), inline otherwise.
func (g *schemas) ref(t reflect.Type, m mode) obj {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return obj{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Struct:
		if t == reflect.TypeFor[tenants.ConfigDocument]() {
			m = input // what GET .../config answers, PUT takes
		}
		if _, ok := inputNames[t]; m == input && !ok && t.PkgPath() == domainPkg {
			m = shared
		}
		n := g.name(t, m)
		if _, ok := g.comps[n]; !ok {
			g.comps[n] = obj{} // reserve: types may refer to themselves
			g.comps[n] = g.object(t, m)
		}
		return obj{"$ref": "#/components/schemas/" + n}
	case t == rawJSONType:
		return obj{} // any JSON value
	case t.Kind() == reflect.Slice:
		return obj{"type": "array", "items": g.ref(t.Elem(), m)}
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
		return obj{"type": "object", "additionalProperties": g.ref(t.Elem(), m)}
	case t.Kind() == reflect.Map:
		return obj{"type": "object"}
	case t.Kind() == reflect.String:
		return obj{"type": "string"}
	case t.Kind() == reflect.Bool:
		return obj{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return obj{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return obj{"type": "number"}
	}
	return obj{}
}

// object is the schema of struct type t. Input schemas leave out the read-only fields and
// require what is tagged required; output schemas require every field but omitempty ones.
// Only input schemas take enum tags: the enums of responses are outputFields'.
func (g *schemas) object(t reflect.Type, m mode) obj {
	props := obj{}
	var required []string
	for _, f := range fieldsOf(t, m == input) {
		s := g.ref(f.Type, m)
		if d := f.Tag.Get("doc"); d != "" {
			s["description"] = d
		}
		if m == output {
			// Set beside the doc tag where responses say more (or otherwise) than requests.
			for k, v := range outputFields[f.Owner.Name()+"."+f.Name] {
				s[k] = v
			}
			if f.Owner.PkgPath() == domainPkg && s["type"] == "string" && (f.Name == "id" || strings.HasSuffix(f.Name, "_id")) && f.Name != "request_id" {
				s["format"] = "uuid"
			}
		}
		if e := f.Tag.Get("enum"); e != "" && (m == input || f.Owner.PkgPath() != domainPkg) {
			s["enum"] = strings.Split(e, ",")
		}
		props[f.Name] = s
		if m == input && f.Tag.Get("required") == "true" || m == output && !strings.Contains(f.Opts, "omitempty") {
			required = append(required, f.Name)
		}
	}
	o := obj{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		o["required"] = required
	}
	return o
}

// openAPIPath turns Fiber's /a/:b into OpenAPI's /a/{b}.
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// operationID is the method and the literal segments, singular before a parameter:
// GET /v1/tenants/:slug/routes → getTenantRoutes.
func operationID(method, path string) string {
	segs := strings.Split(strings.TrimPrefix(path, "/v1"), "/")
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for i, s := range segs {
		if s == "" || strings.HasPrefix(s, ":") {
			continue
		}
		if i+1 < len(segs) && strings.HasPrefix(segs[i+1], ":") {
			s = strings.TrimSuffix(s, "s")
		}
		for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '_' || r == ':' }) {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

var errorDocs = map[int]string{
	400: "invalid_request (malformed body or query; `field` may name the culprit) or validation_failed (`field` names it).",
	401: "unauthenticated (no Bearer token) or invalid_credential (unknown token).",
	403: "forbidden: the token may not do this.",
	404: "not_found: no such object, or it belongs to another tenant.",
	409: "conflict (a unique slug, name or path is taken) or version_conflict (stale If-Match/version: re-read and retry).",
	413: "body_too_large.",
	415: "unsupported_media_type: send Content-Type: application/json.",
	500: "internal: see the logs under request_id.",
	503: "not_ready: the database is unreachable or did not answer within the request's bound (TOLLGATE_DB_TIMEOUT), or the server is shutting down; retry after `Retry-After` seconds.",
}

// errorStatuses lists what an endpoint may answer besides success.
func (ep *endpoint) errorStatuses() []int {
	set := map[int]bool{500: true}
	if ep.access != public {
		set[400], set[401] = true, true
	}
	invitee := strings.HasPrefix(ep.path, "/v1/invites/") // a person's answer to an invitation
	if ep.access == adminOnly || ep.path == "/v1/tenants/:slug" && ep.method != http.MethodGet || ep.path == "/v1/billing/export" || ep.path == "/v1/billing/invoices" || strings.HasPrefix(ep.path, "/v1/billing/prices") || invitee {
		set[403] = true
	}
	if ep.access == tenantScoped || strings.HasSuffix(ep.path, "/platform/plans/:name") || invitee || ep.path == "/v1/docs/:asset" {
		set[404] = true
	}
	if ep.path == "/v1/stripe/webhook" { // its signature may be refused; unset, it is not served
		set[400], set[404], set[413] = true, true, true
	}
	if ep.method == http.MethodDelete && strings.HasSuffix(ep.path, "/functions/:name") {
		set[409] = true
	}
	if ep.body != nil || ep.bodyMedia != "" {
		set[400], set[413], set[415] = true, true, true
		if ep.method == http.MethodPost || ep.method == http.MethodPut {
			set[409] = true
		}
	}
	if ep.ifMatch {
		set[409] = true
	}
	if ep.method == http.MethodDelete && strings.HasSuffix(ep.path, "/plans/:id") || strings.HasSuffix(ep.path, "/domains/:id/verify") {
		set[409] = true
	}
	if ep.path == "/readyz" || ep.access != public {
		set[503] = true // every endpoint that reads or writes the store
	}
	out := make([]int, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (s *Server) document() obj {
	g := &schemas{comps: obj{}}
	errRef := g.ref(reflect.TypeFor[errorBody](), output)
	paths := obj{}
	for i := range s.endpoints {
		ep := &s.endpoints[i]
		p := openAPIPath(ep.path)
		item, _ := paths[p].(obj)
		if item == nil {
			item = obj{}
			paths[p] = item
		}
		item[strings.ToLower(ep.method)] = s.operation(g, ep)
	}
	responses := obj{}
	for code, d := range errorDocs {
		headers := obj{"X-Request-Id": obj{"$ref": "#/components/headers/X-Request-Id"}}
		if code == http.StatusServiceUnavailable {
			headers["Retry-After"] = obj{"$ref": "#/components/headers/Retry-After"}
		}
		responses[strconv.Itoa(code)] = obj{
			"description": d,
			"headers":     headers,
			"content":     obj{"application/json": obj{"schema": errRef}},
		}
	}
	responses["Error"] = obj{
		"description": "Any error, as the envelope; `code` is one of the stable codes and decides the status.",
		"headers":     obj{"X-Request-Id": obj{"$ref": "#/components/headers/X-Request-Id"}},
		"content":     obj{"application/json": obj{"schema": errRef}},
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{
			"title":   "Tollgate management API",
			"version": "1",
			"description": "Manage tenants, routes, consumers, keys, plans and tokens. Authenticate with " +
				"`Authorization: Bearer <token>`: the operator's admin token may do everything; a tenant token " +
				"only its own tenant (other tenants answer 404). Every error is the envelope " +
				"`{\"error\":{\"code\",\"message\",\"request_id\",\"field\"}}`; an unknown path is 404 not_found, " +
				"a known path with another method 405 method_not_allowed with Allow. Bodies are strict JSON: " +
				"unknown fields, wrong types and trailing data are 400 invalid_request. Lists take ?limit= " +
				"(1–500, default 50) and ?cursor= (the previous page's next_cursor).",
		},
		"servers":  []obj{{"url": "/"}},
		"security": []obj{{"bearer": []string{}}},
		"tags": []obj{
			{"name": tagTenants}, {"name": tagRoutes}, {"name": tagConsumers}, {"name": tagKeys},
			{"name": tagPlans}, {"name": tagTokens}, {"name": tagJWTIssuers}, {"name": tagAccessRules}, {"name": tagDomains}, {"name": tagPlatform}, {"name": tagCells}, {"name": tagHealth},
		},
		"paths": paths,
		"components": obj{
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer",
				"description": "The admin token, or a tenant token (tgt_...) from POST /v1/tenants/{slug}/tokens."}},
			"schemas":   g.comps,
			"responses": responses,
			"headers": obj{
				"X-Request-Id": obj{"description": "The request's id: the client's X-Request-Id if it is 1–64 of [A-Za-z0-9-_], else a new one.",
					"schema": obj{"type": "string"}},
				"ETag":        obj{"description": "The object's version, quoted; send it back in If-Match.", "schema": obj{"type": "string"}},
				"Location":    obj{"description": "Where the created object lives.", "schema": obj{"type": "string"}},
				"Retry-After": obj{"description": "Seconds to wait before retrying a 503 not_ready.", "schema": obj{"type": "integer"}},
			},
			"parameters": obj{
				"limit": obj{"name": "limit", "in": "query", "description": "Page size.",
					"schema": obj{"type": "integer", "minimum": 1, "maximum": tenants.MaxPageLimit, "default": tenants.DefaultPageLimit}},
				"cursor": obj{"name": "cursor", "in": "query", "description": "next_cursor of the previous page.",
					"schema": obj{"type": "string"}},
				"If-Match": obj{"name": "If-Match", "in": "header",
					"description": "The ETag you read (\"3\"), or * to overwrite whatever is current. Required unless the body has \"version\".",
					"schema":      obj{"type": "string"}},
				"X-Request-Id": obj{"name": "X-Request-Id", "in": "header", "description": "Your id for the request (1–64 of [A-Za-z0-9-_]).",
					"schema": obj{"type": "string", "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$"}},
			},
		},
	}
}

func (s *Server) operation(g *schemas, ep *endpoint) obj {
	op := obj{
		"operationId": operationID(ep.method, ep.path),
		"summary":     ep.summary,
		"tags":        []string{ep.tag},
	}
	if ep.desc != "" {
		op["description"] = strings.TrimSpace(ep.desc)
	}
	if ep.access == public {
		op["security"] = []obj{}
	}
	params := []obj{}
	for _, seg := range strings.Split(ep.path, "/") {
		if !strings.HasPrefix(seg, ":") {
			continue
		}
		name := seg[1:]
		schema := obj{"type": "string", "format": "uuid"}
		desc := "Object id."
		if name == "slug" {
			schema = obj{"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"}
			desc = "The tenant's slug."
		}
		if name == "name" {
			schema = obj{"type": "string", "pattern": "^[a-z0-9_-]{1,63}$"}
			desc = "The plan's name."
			if strings.Contains(ep.path, "/functions/") {
				desc = "The function's name."
			}
		}
		if name == "asset" {
			schema = obj{"type": "string", "enum": apidocs.Names()}
			desc = "The file's name."
		}
		params = append(params, obj{"name": name, "in": "path", "required": true, "description": desc, "schema": schema})
	}
	if ep.list {
		params = append(params, obj{"$ref": "#/components/parameters/limit"}, obj{"$ref": "#/components/parameters/cursor"})
	}
	for _, q := range ep.params {
		params = append(params, obj{"name": q, "in": "query", "schema": obj{"type": "string"}})
	}
	if ep.ifMatch {
		params = append(params, obj{"$ref": "#/components/parameters/If-Match"})
	}
	params = append(params, obj{"$ref": "#/components/parameters/X-Request-Id"})
	op["parameters"] = params
	if ep.body != nil {
		op["requestBody"] = obj{
			"required": !ep.bodyOptional,
			"content":  obj{"application/json": obj{"schema": g.ref(reflect.TypeOf(ep.body), input)}},
		}
		if ep.yaml {
			op["requestBody"].(obj)["content"].(obj)[mimeYAML] = obj{"schema": g.ref(reflect.TypeOf(ep.body), input)}
		}
	}
	if ep.bodyMedia != "" {
		op["requestBody"] = obj{"required": true, "content": obj{ep.bodyMedia: obj{"schema": obj{"type": "string", "format": "binary"}}}}
	}
	if ep.path == "/v1/stripe/webhook" { // Stripe's own document, read as signed, not decoded into a type
		op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": obj{
			"type": "object", "description": "A Stripe event (https://docs.stripe.com/api/events/object), exactly as Stripe signed it.",
		}}}}
	}
	headers := obj{"X-Request-Id": obj{"$ref": "#/components/headers/X-Request-Id"}}
	if ep.etag {
		headers["ETag"] = obj{"$ref": "#/components/headers/ETag"}
	}
	if ep.status == http.StatusCreated && !ep.secret { // keys and tokens cannot be read back
		headers["Location"] = obj{"$ref": "#/components/headers/Location"}
	}
	ok := obj{"description": http.StatusText(ep.status), "headers": headers}
	if ep.result != nil {
		ok["content"] = obj{"application/json": obj{"schema": g.ref(reflect.TypeOf(ep.result), output)}}
		if ep.csv {
			ok["content"].(obj)["text/csv"] = obj{"schema": obj{"type": "string"}}
		}
		if ep.yaml && ep.body == nil {
			ok["content"].(obj)[mimeYAML] = ok["content"].(obj)["application/json"]
		}
	}
	if ep.result == nil && len(ep.media) > 0 {
		content := obj{}
		for _, m := range ep.media {
			content[m] = obj{"schema": obj{"type": "string"}}
		}
		ok["content"] = content
	}
	if ep.secret {
		ok["description"] = "Created. The plaintext secret is in this response only (Cache-Control: no-store)."
	}
	responses := obj{strconv.Itoa(ep.status): ok}
	for _, code := range ep.errorStatuses() {
		responses[strconv.Itoa(code)] = obj{"$ref": "#/components/responses/" + strconv.Itoa(code)}
	}
	responses["default"] = obj{"$ref": "#/components/responses/Error"}
	op["responses"] = responses
	return op
}
