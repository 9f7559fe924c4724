package api

import (
	"net/http"

	"tollgate/tenants"
)

// endpoint is one method+path of the API: how it is served and how it is documented.
// The router and the OpenAPI document are both built from the table below, so they cannot
// drift apart.
type endpoint struct {
	method  string
	path    string // Fiber syntax: /v1/tenants/:slug
	access  access
	handle  handlerFunc
	tag     string
	summary string
	desc    string

	body         any  // zero value of the request body struct; nil: no body
	bodyOptional bool // an empty body is accepted
	status       int  // success status
	result       any  // success body; nil: none
	list         bool // takes ?limit=&cursor=
	etag         bool // the success response carries ETag
	ifMatch      bool // takes If-Match (and "version" in the body)
	secret       bool // the response holds a plaintext secret shown once
}

func (ep *endpoint) query() []string {
	if ep.list {
		return []string{"limit", "cursor"}
	}
	return nil
}

const (
	tagHealth    = "health"
	tagTenants   = "tenants"
	tagRoutes    = "routes"
	tagConsumers = "consumers"
	tagKeys      = "keys"
	tagPlans     = "plans"
	tagTokens    = "tokens"
)

const (
	ifMatchDoc = ` Conditional: send If-Match with the ETag you read (or "version" in the body); a stale version gets 409 version_conflict, a missing one 400 validation_failed on "version". If-Match: * overwrites whatever is current.`
	scopedDoc  = ` The admin token, or a token of this tenant; another tenant's token gets 404.`
)

func (s *Server) table() []endpoint {
	return []endpoint{
		{method: http.MethodGet, path: "/healthz", access: public, handle: s.healthz, tag: tagHealth,
			summary: "Liveness", desc: "Always 200 while the process serves.", status: 200, result: status{}},
		{method: http.MethodGet, path: "/readyz", access: public, handle: s.readyz, tag: tagHealth,
			summary: "Readiness", desc: "200 when the store answers; 503 not_ready otherwise and while shutting down.", status: 200, result: status{}},
		{method: http.MethodGet, path: "/v1/openapi.json", access: public, handle: s.serveOpenAPI, tag: tagHealth,
			summary: "This document", status: 200, result: map[string]any{}},

		{method: http.MethodPost, path: "/v1/tenants", access: adminOnly, handle: s.createTenant, tag: tagTenants,
			summary: "Create a tenant", desc: "Admin token only.", body: tenantCreate{}, status: 201, result: tenants.Tenant{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants", access: adminOnly, handle: s.listTenants, tag: tagTenants,
			summary: "List tenants", desc: "Admin token only.", status: 200, result: list[tenants.Tenant]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug", access: tenantScoped, handle: s.getTenant, tag: tagTenants,
			summary: "Get a tenant", desc: scopedDoc, status: 200, result: tenants.Tenant{}, etag: true},
		{method: http.MethodPatch, path: "/v1/tenants/:slug", access: tenantScoped, handle: s.patchTenant, tag: tagTenants,
			summary: "Change a tenant's name or plan",
			desc:    "Only the fields sent change; the slug is immutable. Only the admin token may change the plan (403 forbidden)." + scopedDoc + ifMatchDoc,
			body:    tenantPatch{}, status: 200, result: tenants.Tenant{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug", access: tenantScoped, handle: s.deleteTenant, tag: tagTenants,
			summary: "Delete a tenant and everything it owns", desc: "Admin token only (a tenant token gets 403).", status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/routes", access: tenantScoped, handle: s.createRoute, tag: tagRoutes,
			summary: "Create a route", desc: scopedDoc, body: routeBody{}, status: 201, result: tenants.Route{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/routes", access: tenantScoped, handle: s.listRoutes, tag: tagRoutes,
			summary: "List routes", desc: scopedDoc, status: 200, result: list[tenants.Route]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, handle: s.getRoute, tag: tagRoutes,
			summary: "Get a route", desc: scopedDoc, status: 200, result: tenants.Route{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, handle: s.putRoute, tag: tagRoutes,
			summary: "Replace a route", desc: "Full replacement: omitted optional fields take their defaults." + scopedDoc + ifMatchDoc,
			body: routeUpdate{}, status: 200, result: tenants.Route{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/routes/:id", access: tenantScoped, handle: s.deleteRoute, tag: tagRoutes,
			summary: "Delete a route", desc: scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/consumers", access: tenantScoped, handle: s.createConsumer, tag: tagConsumers,
			summary: "Create a consumer", desc: scopedDoc, body: consumerBody{}, status: 201, result: tenants.Consumer{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers", access: tenantScoped, handle: s.listConsumers, tag: tagConsumers,
			summary: "List consumers", desc: scopedDoc, status: 200, result: list[tenants.Consumer]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, handle: s.getConsumer, tag: tagConsumers,
			summary: "Get a consumer", desc: scopedDoc, status: 200, result: tenants.Consumer{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, handle: s.putConsumer, tag: tagConsumers,
			summary: "Replace a consumer", desc: "Full replacement: an omitted plan removes the consumer's plan." + scopedDoc + ifMatchDoc,
			body: consumerUpdate{}, status: 200, result: tenants.Consumer{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/consumers/:id", access: tenantScoped, handle: s.deleteConsumer, tag: tagConsumers,
			summary: "Delete a consumer and its keys", desc: scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/consumers/:id/keys", access: tenantScoped, handle: s.createKey, tag: tagKeys,
			summary: "Create an API key", desc: "The plaintext key is in this response only; only its hash is stored. The body may be empty or {}." + scopedDoc,
			body: keyBody{}, bodyOptional: true, status: 201, result: createdKey{}, secret: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/consumers/:id/keys", access: tenantScoped, handle: s.listKeys, tag: tagKeys,
			summary: "List a consumer's keys", desc: "Without plaintext: the prefix tells keys apart." + scopedDoc, status: 200, result: list[tenants.Key]{}, list: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/consumers/:id/keys/:key_id", access: tenantScoped, handle: s.deleteKey, tag: tagKeys,
			summary: "Revoke a key", desc: scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/plans", access: tenantScoped, handle: s.createPlan, tag: tagPlans,
			summary: "Create a plan", desc: scopedDoc, body: planBody{}, status: 201, result: tenants.Plan{}, etag: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/plans", access: tenantScoped, handle: s.listPlans, tag: tagPlans,
			summary: "List plans", desc: scopedDoc, status: 200, result: list[tenants.Plan]{}, list: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, handle: s.getPlan, tag: tagPlans,
			summary: "Get a plan", desc: scopedDoc, status: 200, result: tenants.Plan{}, etag: true},
		{method: http.MethodPut, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, handle: s.putPlan, tag: tagPlans,
			summary: "Replace a plan", desc: "Full replacement: omitted limits are removed." + scopedDoc + ifMatchDoc,
			body: planUpdate{}, status: 200, result: tenants.Plan{}, etag: true, ifMatch: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/plans/:id", access: tenantScoped, handle: s.deletePlan, tag: tagPlans,
			summary: "Delete a plan", desc: "409 conflict while a consumer uses it." + scopedDoc, status: 204},

		{method: http.MethodPost, path: "/v1/tenants/:slug/tokens", access: tenantScoped, handle: s.createToken, tag: tagTokens,
			summary: "Create a management token for the tenant",
			desc:    "The token may do everything within this tenant and nothing outside it. The plaintext is in this response only." + scopedDoc,
			body:    tokenBody{}, status: 201, result: createdToken{}, secret: true},
		{method: http.MethodGet, path: "/v1/tenants/:slug/tokens", access: tenantScoped, handle: s.listTokens, tag: tagTokens,
			summary: "List the tenant's tokens", desc: "Without plaintext." + scopedDoc, status: 200, result: list[tenants.Token]{}, list: true},
		{method: http.MethodDelete, path: "/v1/tenants/:slug/tokens/:id", access: tenantScoped, handle: s.deleteToken, tag: tagTokens,
			summary: "Revoke a token", desc: scopedDoc, status: 204},
	}
}
