package api

import (
	"net/http"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// endpoint is one method+path of the API: how it is served and how it is documented.
// The router and the OpenAPI document are both built from the table below, so they cannot
// drift apart.
type endpoint struct {
	method  string
	path    string // Fiber syntax: /v1/tenants/:slug
	access  access
	class   rbac.Class // what the policy decides on; "" = rbac.TenantAdmin (owners and admins)
	handle  handlerFunc
	tag     string
	summary string
	desc    string

	body         any      // zero value of the request body struct; nil: no body
	bodyMedia    string   // the body's media type when it is not JSON (body nil): bytes taken as they are
	bodyOptional bool     // an empty body is accepted
	status       int      // success status
	result       any      // success body; nil: none
	list         bool     // takes ?limit=&cursor=
	etag         bool     // the success response carries ETag
	ifMatch      bool     // takes If-Match (and "version" in the body)
	secret       bool     // the response holds a plaintext secret shown once
	params       []string // query parameters it takes besides limit and cursor (documented as strings)
	csv          bool     // the success response may also be text/csv (?format=csv)
	yaml         bool     // the body and the success response may also be application/yaml
	heavy        bool     // a tenant may run only Config.HeavyCalls of these at once (heavy.go)
	media        []string // the success body's media types when it is not JSON (result nil)
}

func (ep *endpoint) query() []string {
	if ep.list {
		return append([]string{"limit", "cursor"}, ep.params...)
	}
	return ep.params
}

const (
	tagHealth    = "health"
	tagTenants   = "tenants"
	tagRoutes    = "routes"
	tagConsumers = "consumers"
	tagKeys      = "keys"
	tagPlans     = "plans"
	tagTokens    = "tokens"
	// JWT auth and access rules.
	tagJWTIssuers  = "jwt-issuers"
	tagAccessRules = "policy"
	tagPlatform    = "platform"
	tagCells       = "cells"
	// People and audit.
	tagAudit   = "audit"
	tagMembers = "members"
	tagInvites = "invites"
	// Usage and billing.
	tagUsage  = "usage"
	tagPrices = "prices"
	// Custom domains and their certificates.
	tagDomains = "domains"
	// Config as code.
	tagConfig = "config"
	// Tenants' WebAssembly filters.
	tagFunctions = "functions"
)

const (
	ifMatchDoc = ` Conditional: send If-Match with the ETag you read (or "version" in the body); a stale version gets 409 version_conflict, a missing one 400 validation_failed on "version". If-Match: * overwrites whatever is current.`
	scopedDoc  = ` The admin token, or a token of this tenant; another tenant's token gets 404.`
)

func (s *Server) table() []endpoint {
	routes, consumers, plans, jwtIssuers, domains := s.routes(), s.consumers(), s.plans(), s.jwtIssuers(), s.domains()
	return []endpoint{
		{method: http.MethodGet, path: "/healthz", access: public, handle: s.healthz, tag: tagHealth,
			summary: "Liveness", desc: "Always 200 while the process serves.", status: 200, result: status{}},
		{method: http.MethodGet, path: "/readyz", access: public, handle: s.readyz, tag: tagHealth,
			summary: "Readiness", desc: "200 when the store answers; 503 not_ready otherwise and while shutting down.", status: 200, result: status{}},
		{method: http.MethodGet, path: "/v1/openapi.json", access: public, handle: s.serveOpenAPI, tag: tagHealth,
			summary: "This document", status: 200, result: map[string]any{}},
		{method: http.MethodGet, path: "/v1/docs", access: public, handle: s.serveDocs, tag: tagHealth,
			summary: "This document as a reference page", desc: "HTML for a browser: /v1/openapi.json rendered by the files under /v1/docs/, with no inline script or style.",
			status: 200, media: []string{"text/html"}},
		{method: http.MethodGet, path: "/v1/docs/:asset", access: public, handle: s.serveDocsAsset, tag: tagHealth,
			summary: "A file of the reference page", desc: "The renderer's script and stylesheets, embedded in the binary.",
			status: 200, media: []string{"text/javascript", "text/css"}},

		{method: http.MethodPost, path: "/v1/tenants", access: adminOnly, handle: s.createTenant, tag: tagTenants,
			summary: "Create a tenant", desc: "Admin token only.", body: tenantCreate{}, status: 201, result: tenants.Tenant{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants", access: adminOnly, handle: s.listTenants, tag: tagTenants,
			summary: "List tenants", desc: "Admin token only.", status: 200, result: list[tenants.Tenant]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug", access: tenantScoped, class: rbac.Read, handle: s.getTenant, tag: tagTenants,
			summary: "Get a tenant", desc: scopedDoc, status: 200, result: tenants.Tenant{}, etag: true},
		{method: http.MethodPatch, path: "/v1/tenants/:slug", access: tenantScoped, class: rbac.TenantAdmin, handle: s.patchTenant, tag: tagTenants,
			summary: "Change a tenant's name or plan",
			desc:    "Only the fields sent change; the slug is immutable. Only the admin token may change the plan (403 forbidden)." + scopedDoc + ifMatchDoc,
			body:    tenantPatch{}, status: 200, result: tenants.Tenant{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug", access: tenantScoped, class: rbac.TenantAdmin, handle: s.deleteTenant, tag: tagTenants,
			summary: "Delete a tenant and everything it owns", desc: "The admin token, or an owner of the tenant signed in to the console (its session cookie); a tenant token, and any other role, gets 403.", status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/routes", access: tenantScoped, class: rbac.Write, handle: routes.handleCreate, tag: tagRoutes,
			summary: "Create a route", desc: scopedDoc, body: tenants.Route{}, status: 201, result: tenants.Route{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/routes", access: tenantScoped, class: rbac.Read, handle: routes.handleList, tag: tagRoutes,
			summary: "List routes", desc: "In creation order. With ?q=, the routes whose name starts with q (case sensitive, up to 400 bytes), in bytewise name order; pass next_cursor back with the same q." + scopedDoc,
			status: 200, result: list[tenants.Route]{}, list: true, params: []string{"q"}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, class: rbac.Read, handle: routes.handleGet, tag: tagRoutes,
			summary: "Get a route", desc: scopedDoc, status: 200, result: tenants.Route{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, class: rbac.Write, handle: routes.handlePut, tag: tagRoutes,
			summary: "Replace a route", desc: "Full replacement: omitted optional fields take their defaults." + scopedDoc + ifMatchDoc,
			body: routeUpdate{}, status: 200, result: tenants.Route{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, class: rbac.Write, handle: routes.handleDelete, tag: tagRoutes,
			summary: "Delete a route", desc: scopedDoc, status: 204},
		{method: http.MethodPost, path: "/v1/tenants/:slug/routes:import", access: tenantScoped, heavy: true, class: rbac.Write, handle: s.importRoutes, tag: tagRoutes,
			summary: "Import routes from an OpenAPI document",
			desc:    "One route per path of the document (OpenAPI 3.0; 3.1 as far as kin-openapi reads it), named openapi:<api>:<path> where api is the document's title as a slug: the path exactly (\"=/v1/users/{id}\", each {param} a path parameter), under prefix or the first server URL's path; the methods of its operations (TRACE and others the edge does not route are left out, and noted); auth from its security, the strictest of its operations' (noted when they differ), unless auth is set. Paths that cannot be routes are listed in skipped, with why. All the routes are written in one transaction, each validated and limited as on POST .../routes; an error names the document path (openapi.paths[\"/users/{id}\"]) or the body field. Importing again updates the routes this document's imports made, lists those of paths it no longer has in stale (deleted with prune), and leaves every other route alone. dry_run answers the same and changes nothing. One audit entry, routes.import." + scopedDoc,
			body:    importBody{}, status: 200, result: importResult{}},

		{method: http.MethodPost, path: "/v1/tenants/:slug/consumers", access: tenantScoped, class: rbac.Write, handle: consumers.handleCreate, tag: tagConsumers,
			summary: "Create a consumer", desc: scopedDoc, body: tenants.Consumer{}, status: 201, result: tenants.Consumer{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers", access: tenantScoped, class: rbac.Read, handle: consumers.handleList, tag: tagConsumers,
			summary: "List consumers", desc: scopedDoc, status: 200, result: list[tenants.Consumer]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, class: rbac.Read, handle: consumers.handleGet, tag: tagConsumers,
			summary: "Get a consumer", desc: scopedDoc, status: 200, result: tenants.Consumer{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, class: rbac.Write, handle: consumers.handlePut, tag: tagConsumers,
			summary: "Replace a consumer", desc: "Full replacement: an omitted plan removes the consumer's plan." + scopedDoc + ifMatchDoc,
			body: consumerUpdate{}, status: 200, result: tenants.Consumer{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, class: rbac.Write, handle: consumers.handleDelete, tag: tagConsumers,
			summary: "Delete a consumer and its keys", desc: scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/consumers/:id/keys", access: tenantScoped, class: rbac.Keys, handle: s.createKey, tag: tagKeys,
			summary: "Create an API key", desc: "The plaintext key is in this response only; only its hash is stored. The body may be empty or {}; label and expires_at are optional. From expires_at on the edges answer the key 401 expired_key." + scopedDoc,
			body: keyBody{}, bodyOptional: true, status: 201, result: createdKey{}, secret: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers/:id/keys", access: tenantScoped, class: rbac.Read, handle: s.listKeys, tag: tagKeys,
			summary: "List a consumer's keys", desc: "Without plaintext: the prefix and label tell keys apart. last_used_at is when an edge last took the key, reported in batches: it trails the last call by up to a minute." + scopedDoc, status: 200, result: list[tenants.Key]{}, list: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/consumers/:id/keys/:key_id", access: tenantScoped, class: rbac.Keys, handle: s.deleteKey, tag: tagKeys,
			summary: "Revoke a key", desc: scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/plans", access: tenantScoped, class: rbac.Write, handle: plans.handleCreate, tag: tagPlans,
			summary: "Create a plan", desc: scopedDoc, body: planInput{}, status: 201, result: tenants.ConsumerPlan{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/plans", access: tenantScoped, class: rbac.Read, handle: plans.handleList, tag: tagPlans,
			summary: "List plans", desc: scopedDoc, status: 200, result: list[tenants.ConsumerPlan]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, class: rbac.Read, handle: plans.handleGet, tag: tagPlans,
			summary: "Get a plan", desc: scopedDoc, status: 200, result: tenants.ConsumerPlan{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, class: rbac.Write, handle: plans.handlePut, tag: tagPlans,
			summary: "Replace a plan", desc: "Full replacement: omitted limits are removed." + scopedDoc + ifMatchDoc,
			body: planUpdate{}, status: 200, result: tenants.ConsumerPlan{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, class: rbac.Write, handle: plans.handleDelete, tag: tagPlans,
			summary: "Delete a plan", desc: "409 conflict while a consumer uses it." + scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/jwt-issuers", access: tenantScoped, class: rbac.Write, handle: jwtIssuers.handleCreate, tag: tagJWTIssuers,
			summary: "Add a JWT issuer", desc: "Tokens the issuer signs authenticate callers of the tenant's jwt and key_or_jwt routes. hs256_secret is write-only." + scopedDoc,
			body: tenants.Issuer{}, status: 201, result: tenants.Issuer{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/jwt-issuers", access: tenantScoped, class: rbac.Read, handle: jwtIssuers.handleList, tag: tagJWTIssuers,
			summary: "List JWT issuers", desc: "Without secrets." + scopedDoc, status: 200, result: list[tenants.Issuer]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/jwt-issuers/:id", access: tenantScoped, class: rbac.Read, handle: jwtIssuers.handleGet, tag: tagJWTIssuers,
			summary: "Get a JWT issuer", desc: "Without its secret." + scopedDoc, status: 200, result: tenants.Issuer{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/jwt-issuers/:id", access: tenantScoped, class: rbac.Write, handle: jwtIssuers.handlePut, tag: tagJWTIssuers,
			summary: "Replace a JWT issuer", desc: "Full replacement: omitted optional fields take their defaults, except that a body with no key source (jwks_url, keys, hs256_secret) keeps the stored hs256_secret." + scopedDoc + ifMatchDoc,
			body: jwtIssuerUpdate{}, status: 200, result: tenants.Issuer{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/jwt-issuers/:id", access: tenantScoped, class: rbac.Write, handle: jwtIssuers.handleDelete, tag: tagJWTIssuers,
			summary: "Remove a JWT issuer", desc: "Its tokens stop working at the edges within moments." + scopedDoc, status: 204},

		{method: http.MethodGet, path: "/v1/tenants/:slug/policy", access: tenantScoped, class: rbac.Read, handle: s.getAccessRules, tag: tagAccessRules,
			summary: "Get the tenant's policy", desc: "404 not_found until one is put." + scopedDoc, status: 200, result: tenants.AccessRules{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/policy", access: tenantScoped, class: rbac.Write, handle: s.putAccessRules, tag: tagAccessRules,
			summary: "Create or replace the tenant's policy",
			desc: "Routes with \"policy\": true are checked against it at the edge; without a policy they deny every call. Validated by compiling it: a bad rule is 400 validation_failed with field naming it (\"rules[2][1]\")." + scopedDoc +
				` Optionally conditional: send If-Match with the ETag you read (or "version" in the body); a stale version gets 409 version_conflict. Without either, PUT replaces whatever is current.`,
			body: accessRulesPut{}, status: 200, result: tenants.AccessRules{}, etag: true, ifMatch: true},

		{method: http.MethodPost, path: "/v1/tenants/:slug/tokens", access: tenantScoped, class: rbac.TenantAdmin, handle: s.createToken, tag: tagTokens,
			summary: "Create a management token for the tenant",
			desc:    "The token may do everything within this tenant and nothing outside it. The plaintext is in this response only." + scopedDoc,
			body:    tokenBody{}, status: 201, result: createdToken{}, secret: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/tokens", access: tenantScoped, class: rbac.TenantAdmin, handle: s.listTokens, tag: tagTokens,
			summary: "List the tenant's tokens", desc: "Without plaintext." + scopedDoc, status: 200, result: list[tenants.Token]{}, list: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/tokens/:id", access: tenantScoped, class: rbac.TenantAdmin, handle: s.deleteToken, tag: tagTokens,
			summary: "Revoke a token", desc: scopedDoc, status: 204},

		{method: http.MethodGet, path: "/v1/cells", access: adminOnly, handle: s.listCells, tag: tagCells,
			summary: "List the cells", desc: "Admin token only. The edge pools declared to the api (TOLLGATE_CELLS), in their order, with how many tenants each serves. A new tenant goes to the one with the fewest unless its create names one.",
			status: 200, result: list[tenants.CellInfo]{}},
		{method: http.MethodPut, path: "/v1/tenants/:slug/cell", access: tenantScoped, class: rbac.TenantAdmin, handle: s.putTenantCell, tag: tagCells,
			summary: "Move a tenant to another cell",
			desc:    "Admin token only (403 otherwise). In one transaction the tenant's cell changes and every one of its config entries is put to the new cell's bucket, then deleted from the old one's, so the new cell's edges hold the tenant before the old cell's drop it. Moving to the cell the tenant is in changes nothing. 400 validation_failed when the cell is not declared. One audit entry, cells.update, with the cell before and after.",
			body:    cellBody{}, status: 200, result: tenants.Tenant{}, etag: true},
		{method: http.MethodGet, path: "/v1/platform/plans", access: anyToken, handle: s.listPlatformPlans, tag: tagPlatform,
			summary: "List the platform plans", desc: "The plans a tenant's \"plan\" may name, with the limits they put on the whole tenant. Any token; one page holds them all.",
			status: 200, result: list[tenants.PlatformPlan]{}},
		{method: http.MethodGet, path: "/v1/platform/plans/:name", access: anyToken, handle: s.getPlatformPlan, tag: tagPlatform,
			summary: "Get a platform plan", desc: "Any token.", status: 200, result: tenants.PlatformPlan{}, etag: true},
		{method: http.MethodPut, path: "/v1/platform/plans/:name", access: adminOnly, handle: s.putPlatformPlan, tag: tagPlatform,
			summary: "Create or replace a platform plan",
			desc:    "Admin token only. Full replacement: omitted rate, quota and concurrency limits are removed; omitted resource limits take their ceilings. The config of every tenant on the plan is re-published in the same transaction, so the edges apply the new limits within moments." + ifMatchDoc,
			body:    platformPlanBody{}, status: 200, result: tenants.PlatformPlan{}, etag: true, ifMatch: true},

		// Config as code: see config.go.
		{method: http.MethodGet, path: "/v1/tenants/:slug/config", access: tenantScoped, heavy: true, class: rbac.Read, handle: s.getConfig, tag: tagConfig,
			summary: "Export the tenant's config as one document",
			desc:    "Routes, consumers, plans, JWT issuers, the policy and custom domains, each list sorted by name, without ids, versions, timestamps or secrets (no API keys, no hs256_secret, no certificates). JSON, or YAML with Accept: application/yaml. The same state always exports to the same bytes; revision stamps it." + scopedDoc,
			status:  200, result: tenants.ConfigDocument{}, yaml: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/config", access: tenantScoped, heavy: true, class: rbac.Write, handle: s.putConfig, tag: tagConfig,
			summary: "Apply a config document",
			desc:    "Makes the tenant's config what the document says, in one transaction: objects are matched by name and created or updated (only when they differ); with ?prune=true the objects of the kinds the document lists but leaves out are deleted (a list left out is left alone). Each object is validated as its own endpoint validates it; errors name the document path (routes[3].upstream.targets[0].url). ?dry_run=true answers the plan and changes nothing. A document whose revision is no longer current gets 409 version_conflict unless ?force=true (a document that changes nothing is never refused). A JWT issuer with no key source keeps its stored hs256_secret. Custom domains are kept or pruned, never claimed here. The body is JSON, or YAML with Content-Type: application/yaml. One audit entry, config.apply, records an apply that changed something." + scopedDoc,
			body:    tenants.ConfigDocument{}, yaml: true, params: configParams, status: 200, result: tenants.ConfigPlan{}},

		// Functions: see function.go.
		{method: http.MethodPut, path: "/v1/tenants/:slug/functions/:name", access: tenantScoped, class: rbac.Write, handle: s.putFunction, tag: tagFunctions,
			summary:   "Upload a function (a proxy-wasm filter)",
			desc:      "The body is the WebAssembly module, Content-Type: application/wasm (else 415 unsupported_media_type). It must be WebAssembly that exports what proxy-wasm 0.2.x needs and imports only its host calls from env (else 400 validation_failed on module, saying what is wrong), and fit the plan's function_bytes (else 400 on function_bytes; over 16 MiB, 413). The module becomes the function's current version (a module equal to the current one adds none); routes keep the version they run until they are saved again. The name is 1-63 of a-z, 0-9, - and _. Past the plan's functions: 400 on functions." + scopedDoc,
			bodyMedia: MediaWasm, status: 200, result: tenants.Function{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions", access: tenantScoped, class: rbac.Read, handle: s.listFunctions, tag: tagFunctions,
			summary: "List functions", desc: "By name, each with its current version and the ids of the routes that run it; one page (a plan allows at most 1000)." + scopedDoc,
			status: 200, result: list[tenants.Function]{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions/:name", access: tenantScoped, class: rbac.Read, handle: s.getFunction, tag: tagFunctions,
			summary: "Get a function", desc: "With ?versions=true, every version (newest first) with the routes that run it." + scopedDoc,
			status: 200, result: tenants.Function{}, params: []string{"versions"}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions/:name/versions", access: tenantScoped, class: rbac.Read, handle: s.listFunctionVersions, tag: tagFunctions,
			summary: "List a function's versions", desc: "Newest first. Roll a route back by setting its functions[].sha256 to an older version's." + scopedDoc,
			status: 200, result: list[tenants.FunctionVersion]{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions/:name/module", access: tenantScoped, class: rbac.Read, handle: s.getFunctionModule, tag: tagFunctions,
			summary: "Download a function's module", desc: "The current version's bytes, or those of ?sha256=<version>." + scopedDoc,
			status: 200, media: []string{MediaWasm}, params: []string{"sha256"}},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/functions/:name", access: tenantScoped, class: rbac.Write, handle: s.deleteFunction, tag: tagFunctions,
			summary: "Delete a function and its versions", desc: "409 conflict while a route runs any of its versions; the message names them." + scopedDoc, status: 204},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions/:name/logs", access: tenantScoped, class: rbac.Read, handle: s.functionLogs, tag: tagFunctions,
			summary: "A function's latest log lines", desc: "What the function logged at the edges (proxy_log) and why an edge gave up on it (trap, time, bad host call), oldest first: the last limit (1-1000, default 100) of the tenant's last 1000 lines, kept up to 24 hours. An edge sends at most a few lines per second per tenant and counts what it drops." + scopedDoc,
			status: 200, result: list[tenants.FunctionLog]{}, params: []string{"limit"}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/functions:logs", access: tenantScoped, class: rbac.Read, handle: s.functionLogs, tag: tagFunctions,
			summary: "All functions' latest log lines", desc: "As .../functions/{name}/logs, for every function of the tenant, or the one ?function= names." + scopedDoc,
			status: 200, result: list[tenants.FunctionLog]{}, params: []string{"limit", "function"}},

		// Custom domains: see domain.go.
		{method: http.MethodPost, path: "/v1/tenants/:slug/domains", access: tenantScoped, class: rbac.Write, handle: domains.handleCreate, tag: tagDomains,
			summary: "Claim a custom domain with its certificate",
			desc:    "The domain is pending: publish a TXT record at verification.record_name holding verification.value. Once the api sees it (automatic checks start 10 s after the claim and back off to every 10 min; or POST .../verify) the domain is verified and the edges serve the tenant on hostname too (plain and TLS; on TLS the certificate is chosen by SNI) within moments; until then they answer it 421 misdirected_request. 400 validation_failed when the PEMs do not parse, the key does not match, the certificate does not cover hostname or is expired; 409 conflict when the tenant has hostname already or another tenant's claim of it is verified. private_key_pem is write-only." + scopedDoc,
			body:    tenants.Domain{}, status: 201, result: tenants.Domain{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/domains", access: tenantScoped, class: rbac.Read, handle: domains.handleList, tag: tagDomains,
			summary: "List custom domains", desc: "Without private keys." + scopedDoc, status: 200, result: list[tenants.Domain]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/domains/:id", access: tenantScoped, class: rbac.Read, handle: domains.handleGet, tag: tagDomains,
			summary: "Get a custom domain", desc: "Without its private key." + scopedDoc, status: 200, result: tenants.Domain{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/domains/:id", access: tenantScoped, class: rbac.Write, handle: domains.handlePut, tag: tagDomains,
			summary: "Replace a custom domain (renew its certificate)",
			desc:    "Full replacement, validated as on POST; the edges present the new certificate from their next handshake on, without a gap. The same hostname keeps its status; another hostname is a new claim (pending, a new verification value)." + scopedDoc + ifMatchDoc,
			body:    domainUpdate{}, status: 200, result: tenants.Domain{}, etag: true, ifMatch: true},
		{method: http.MethodPost, path: "/v1/tenants/:slug/domains/:id/verify", access: tenantScoped, class: rbac.Write, handle: s.verifyDomain, tag: tagDomains,
			summary: "Check a custom domain's DNS proof now",
			desc:    "Looks up the TXT record at verification.record_name and answers the domain as the check left it: verified (the edges serve it within moments), or pending with last_error saying why (no record, not this claim's value, the resolver failed). A pending domain's automatic checks start again from the shortest wait. 409 conflict when the record is there but another tenant's claim of hostname is verified. The body may be empty or {}." + scopedDoc,
			body:    domainVerifyBody{}, bodyOptional: true, status: 200, result: tenants.Domain{}, etag: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/domains/:id", access: tenantScoped, class: rbac.Write, handle: domains.handleDelete, tag: tagDomains,
			summary: "Remove a custom domain", desc: "The edges stop serving it and its certificate within moments." + scopedDoc, status: 204},

		// Usage and billing: see usage.go.
		{method: http.MethodGet, path: "/v1/tenants/:slug/usage", access: tenantScoped, heavy: true, class: rbac.Read, handle: s.tenantUsage, tag: tagUsage,
			summary: "The tenant's metered usage",
			desc:    "Requests, billable requests and bytes from the edges' meters, folded hourly. ?from= and ?to= (RFC 3339 or YYYY-MM-DD, whole UTC hours, to exclusive; default: the current UTC month so far), ?granularity=hour|day, ?group_by= a comma-separated subset of route, consumer, status." + scopedDoc,
			params:  billing.UsageParams, status: 200, result: billing.UsageReport{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/usage/latency", access: tenantScoped, heavy: true, class: rbac.Read, handle: s.tenantLatency, tag: tagUsage,
			summary: "The tenant's request times per route and hour",
			desc:    "p50, p95 and p99 in milliseconds (within 1% of a measured time) of the gateway's own time (arrival to answer, less the upstream's) and of the upstream's time, per route and UTC hour (items), and merged over the range per route (routes), from the sketches the edges measure. ?route= a route id (default: every route), ?from= and ?to= as for usage (default: the current UTC month so far). A streamed answer's time runs to the end of its body." + scopedDoc,
			params:  billing.LatencyParams, status: 200, result: billing.LatencyReport{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/logs", access: tenantScoped, class: rbac.Read, handle: s.tenantLogs, tag: tagUsage,
			summary: "The tenant's request log",
			desc:    "Newest first: every call the edges refused or that failed (status ≥ 400) and a sample of the others (the platform plan's sample rate, 1% by default), within the plan's retention (7 days by default). Filters: ?status= (502, or a class such as 5xx), ?route= (id or name), ?consumer= (id), ?request_id=, ?since= and ?until= (RFC 3339 or YYYY-MM-DD; until exclusive). ?limit= 1–1000 (default 100); ?cursor= the next of the previous page. not_logged counts the window's calls the log does not hold, and why. Entries reach the log a few seconds after the call." + scopedDoc,
			params:  logParams, list: true, status: 200, result: logPage{}},
		{method: http.MethodGet, path: "/v1/billing/export", access: anyToken, handle: s.billingExport, tag: tagUsage,
			summary: "Every tenant's bill for a month",
			desc:    "?period=YYYY-MM (a calendar month in UTC), ?format=csv|json (default csv). Per tenant (and per consumer on per-consumer plans): requests, billable, included, overage, amount in integer minor units of the currency. The same period exported twice gives the same bytes. The admin token, or a user with the finance platform role (403 otherwise).",
			params:  billing.ExportParams, csv: true, status: 200, result: billing.ExportDocument{}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/billing/payment-grace", access: tenantScoped, class: rbac.Read, handle: s.getPaymentGrace, tag: tagPrices,
			summary: "How long a consumer keeps a bought plan once its payments stop",
			desc:    paymentGraceDoc + scopedDoc, status: 200, result: billing.PaymentGrace{}},
		{method: http.MethodPut, path: "/v1/tenants/:slug/billing/payment-grace", access: tenantScoped, class: rbac.TenantAdmin, handle: s.putPaymentGrace, tag: tagPrices,
			summary: "Set how long a consumer keeps a bought plan once its payments stop",
			desc:    paymentGraceDoc + " Each is 0 to 60 days (400 validation_failed otherwise); an event already received keeps the date it set." + scopedDoc,
			body:    billing.PaymentGrace{}, status: 200, result: billing.PaymentGrace{}},
		// Stripe's side of the bill: see stripe.go and the README's Stripe section.
		{method: http.MethodGet, path: "/v1/billing/invoices", access: anyToken, handle: s.invoices, tag: tagUsage,
			summary: "Stripe invoices of a month",
			desc:    "?period=YYYY-MM (default: the current month): the invoices of the platform's Stripe account whose billing period starts in the month, as Stripe's webhooks last described them (status, amounts in minor units, hosted URL). The admin token, or a user with the finance platform role (403 otherwise).",
			params:  []string{"period"}, status: 200, result: billing.InvoiceList{}},
		{method: http.MethodPost, path: "/v1/stripe/webhook", access: public, handle: s.stripeWebhook, tag: tagUsage,
			summary: "Receive a Stripe event",
			desc:    "Stripe's webhook endpoint, served when TOLLGATE_STRIPE_WEBHOOK_SECRET is set (404 otherwise). No token: the Stripe-Signature header must verify against the secret within 5 minutes (400 invalid_signature otherwise). Each event is applied once (invoice.*, customer.subscription.*, checkout.session.completed); a redelivery answers 200 with duplicate true and changes nothing.",
			status:  200, result: billing.WebhookResult{}},
		// A tenant's Stripe Connect account, never typed in: see connect.go.
		{method: http.MethodGet, path: "/v1/tenants/:slug/stripe/account", access: tenantScoped, class: rbac.TenantAdmin, handle: s.getConnectedAccount, tag: tagUsage,
			summary: "The tenant's Stripe Connect account",
			desc:    "status none (consumers pay the platform), unproven (an id typed in before onboarding existed: consumers' checkouts are refused until the tenant connects through Stripe or deletes it), onboarding (created by the platform, Stripe does not let it take charges yet) or ready (consumers' checkouts are made on it). 404 when Stripe is not configured (TOLLGATE_STRIPE_KEY)." + scopedDoc,
			status:  200, result: billing.ConnectedAccount{}},
		{method: http.MethodPost, path: "/v1/tenants/:slug/stripe/account/onboarding", access: tenantScoped, class: rbac.TenantAdmin, handle: s.startOnboarding, tag: tagUsage,
			summary: "Connect the tenant's Stripe account through Stripe",
			desc:    "Creates the tenant's Express account on Stripe unless it has one, and answers a single-use Stripe onboarding URL (an Account Link) for the tenant's admin to open; Stripe sends them back to the console's payments page, which records whether the account can take charges. No account id is taken: the body may be empty or {}, and any field is 400 invalid_request. 409 conflict if the account Stripe answers is another tenant's." + scopedDoc,
			body:    onboardingBody{}, bodyOptional: true, status: 200, result: billing.Onboarding{}},
		{method: http.MethodPost, path: "/v1/tenants/:slug/stripe/account/refresh", access: tenantScoped, class: rbac.TenantAdmin, handle: s.refreshConnectedAccount, tag: tagUsage,
			summary: "Ask Stripe about the tenant's account now",
			desc:    "Retrieves the account from Stripe and records details_submitted and charges_enabled; ready once charges are enabled. 404 when the tenant has no account made by onboarding. The body may be empty or {}." + scopedDoc,
			body:    onboardingBody{}, bodyOptional: true, status: 200, result: billing.ConnectedAccount{}},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/stripe/account", access: tenantScoped, class: rbac.TenantAdmin, handle: s.disconnectAccount, tag: tagUsage,
			summary: "Disconnect the tenant's Stripe account",
			desc:    "Forgets the account (and any unproven id): consumers pay the platform from then on. The account stays on Stripe." + scopedDoc, status: 204},
		// Prices and a tenant's bill of its consumers: see prices.go.
		{method: http.MethodGet, path: "/v1/billing/prices", access: anyToken, handle: s.listPlatformPrices, tag: tagPrices,
			summary: "List the platform plans' price versions", desc: "Every version, by plan, then month." + platformPricesDoc,
			status: 200, result: list[billing.Price]{}},
		{method: http.MethodPut, path: "/v1/billing/prices/:plan/:month", access: anyToken, handle: s.putPlatformPrice, tag: tagPrices,
			summary: "Set a platform plan's price from a month",
			desc:    "Creates or replaces the version. The month must be the current one or later and the plan a platform plan (400 validation_failed otherwise)." + pricesDoc + platformPricesDoc,
			body:    priceBody{}, status: 200, result: billing.Price{}},
		{method: http.MethodDelete, path: "/v1/billing/prices/:plan/:month", access: anyToken, handle: s.deletePlatformPrice, tag: tagPrices,
			summary: "Delete a platform plan's future price version",
			desc:    "Only a version of a later month than the current one (400 validation_failed otherwise)." + pricesDoc + platformPricesDoc, status: 204},
		{method: http.MethodGet, path: "/v1/tenants/:slug/prices", access: tenantScoped, class: rbac.Read, handle: s.listTenantPrices, tag: tagPrices,
			summary: "List the price versions of the tenant's consumer plans", desc: "Every version, by plan, then month." + scopedDoc,
			status: 200, result: list[billing.Price]{}},
		{method: http.MethodPut, path: "/v1/tenants/:slug/prices/:plan/:month", access: tenantScoped, class: rbac.TenantAdmin, handle: s.putTenantPrice, tag: tagPrices,
			summary: "Set a consumer plan's price from a month",
			desc:    "Creates or replaces the version. The month must be the current one or later and the plan one of the tenant's plans; per_consumer is refused (400 validation_failed)." + pricesDoc + scopedDoc,
			body:    priceBody{}, status: 200, result: billing.Price{}},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/prices/:plan/:month", access: tenantScoped, class: rbac.TenantAdmin, handle: s.deleteTenantPrice, tag: tagPrices,
			summary: "Delete a consumer plan's future price version",
			desc:    "Only a version of a later month than the current one (400 validation_failed otherwise)." + pricesDoc + scopedDoc, status: 204},
		{method: http.MethodGet, path: "/v1/tenants/:slug/billing/export", access: tenantScoped, heavy: true, class: rbac.Read, handle: s.consumerExport, tag: tagPrices,
			summary: "The tenant's bill of its consumers for a month",
			desc:    "?period=YYYY-MM, ?format=csv|json (default csv), in the columns of GET /v1/billing/export, then consumer_name (the consumer's name; empty for one deleted since): one row per consumer with usage in the month, priced by the version of its consumer plan in effect then; status free when that version charges nothing (no fee, no unit prices: amount 0 in its currency, as the developer portal calls such a plan Free), unpriced (amount 0, no currency, in no total) when its plan has none or it has no plan." + scopedDoc,
			params:  billing.ExportParams, csv: true, status: 200, result: billing.ExportDocument{}},

		// People and audit.
		{method: http.MethodGet, path: "/v1/tenants/:slug/audit", access: tenantScoped, class: rbac.Read, handle: s.listAudit, tag: tagAudit,
			summary: "The tenant's audit log", desc: "Every successful write to the tenant, newest first: who (a user's email, token:<name> or admin), what (<kind>.<create|update|delete>), which object, when, and what changed (changes: an update's fields before and after, an apply's or an import's objects by name; secrets only as redacted). ?from= and ?to= (RFC 3339, or YYYY-MM-DD for a whole UTC day, to included) bound when; either may be left out." + scopedDoc,
			status: 200, result: list[tenants.AuditEntry]{}, list: true, params: []string{"from", "to"}},
		{method: http.MethodGet, path: "/v1/tenants/:slug/members", access: tenantScoped, class: rbac.Read, handle: s.listMembers, tag: tagMembers,
			summary: "List the tenant's console users and their roles", desc: scopedDoc, status: 200, result: list[tenants.Membership]{}},
		{method: http.MethodPut, path: "/v1/tenants/:slug/members/:id", access: tenantScoped, class: rbac.TenantAdmin, handle: s.putMember, tag: tagMembers,
			summary: "Change a member's role",
			desc:    "id is the member's user_id. Only an owner (or the admin token) may make an owner or change an owner's role; the last owner cannot step down (409 conflict)." + scopedDoc,
			body:    memberRoleBody{}, status: 200, result: tenants.Membership{}},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/members/:id", access: tenantScoped, class: rbac.TenantAdmin, handle: s.deleteMember, tag: tagMembers,
			summary: "Remove a member", desc: "id is the member's user_id. Only an owner may remove an owner; the last owner cannot be removed (409 conflict)." + scopedDoc, status: 204},
		{method: http.MethodGet, path: "/v1/tenants/:slug/invites", access: tenantScoped, class: rbac.TenantAdmin, handle: s.listInvites, tag: tagInvites,
			summary: "List pending invites", desc: "Invitations not yet accepted, declined or withdrawn, with when their link expires (expired ones stay listed for 30 days)." + scopedDoc, status: 200, result: list[tenants.Invite]{}},
		{method: http.MethodPost, path: "/v1/tenants/:slug/invites", access: tenantScoped, class: rbac.TenantAdmin, handle: s.createInvite, tag: tagInvites,
			summary: "Invite an address to the tenant",
			desc:    "Mails the address a single-use link that works for 7 days; nobody becomes a member until a signed-in user whose verified email is that address accepts it. The answer is the same whether or not the address has an account. Inviting the same address again replaces the role and the link (the older link stops working). An address that is already a member gets 409 conflict; only an owner (or the admin token) may invite an owner; at most 100 unexpired invites per tenant; 429 rate_limited past 5 invitation mails to one address, or 200 from the tenant, in an hour." + scopedDoc,
			body:    inviteBody{}, status: 201, result: tenants.Invite{}},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/invites/:email", access: tenantScoped, class: rbac.TenantAdmin, handle: s.deleteInvite, tag: tagInvites,
			summary: "Withdraw a pending invite", desc: "email is the invited address (URL-escaped). Its link stops working." + scopedDoc, status: 204},
		{method: http.MethodPost, path: "/v1/invites/accept", access: anyToken, handle: s.acceptInvite, tag: tagInvites,
			summary: "Accept an invitation",
			desc:    "A signed-in person only: the console's session cookie with X-CSRF-Token (a token or the admin token gets 403 forbidden). The user's email must be verified (403 otherwise) and be the invited address (403, saying nothing more). The link works once: a used, declined, withdrawn, replaced or expired one gets 404 not_found. Returns the new membership (an existing member keeps their role).",
			body:    inviteTokenBody{}, status: 200, result: tenants.Membership{}},
		{method: http.MethodPost, path: "/v1/invites/decline", access: anyToken, handle: s.declineInvite, tag: tagInvites,
			summary: "Decline an invitation", desc: "As accepting, but ends the invitation without a membership.",
			body: inviteTokenBody{}, status: 204},
		{method: http.MethodPut, path: "/v1/platform/roles", access: adminOnly, handle: s.putPlatformRole, tag: tagPlatform,
			summary: "Grant a platform role to an address", desc: "Admin token only. operator acts as an admin in every tenant; finance reads every tenant and exports the bill; empty withdraws the grant and the role. The user with that address holds the role once the address is verified; the answer is the same whether or not the address has an account. A grant mails the address how to sign in, or to create an account of no tenant (with a mailer configured).",
			body: platformRoleBody{}, status: 200, result: tenants.PlatformGrant{}},
	}
}
