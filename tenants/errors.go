// Package tenants is Tollgate's domain: tenants, their routes, consumers, keys and plans,
// the rules that make them valid, the error vocabulary every component speaks, and the
// layout of the config entries the control plane fans out to the edges.
//
// It imports no storage or transport: tenants/postgres stores these types, api serves
// them, edge compiles the entries. Nothing here may do I/O.
package tenants

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes. They are the stable part of every error body the api and the edge return
// ({"error":{"code","message","request_id"}}); clients match on them, so a code once
// published never changes meaning. The README's error-code table is generated from Codes.
const (
	EInvalidRequest    = "invalid_request"     // body is not the JSON the endpoint takes
	EValidation        = "validation_failed"   // a field breaks a rule; Field names it
	EInvalidSignature  = "invalid_signature"   // a webhook's signature does not sign its body with the endpoint's secret
	EUnauthenticated   = "unauthenticated"     // no credential was sent
	EInvalidCredential = "invalid_credential"  // a credential was sent and is not valid here
	EExpiredKey        = "expired_key"         // edge: the API key is past its expires_at
	EForbidden         = "forbidden"           // authenticated, but not allowed to do this
	EAccessDenied      = "policy_denied"       // the tenant's access rules deny this call (edge)
	ENotFound          = "not_found"           // no such object (or not visible to the caller)
	ETenantNotFound    = "tenant_not_found"    // edge: the Host names no tenant
	ERouteNotFound     = "route_not_found"     // edge: no route matches the path
	EMisdirected       = "misdirected_request" // edge: the TLS SNI names another tenant than the Host, or an unverified custom domain
	EMethodNotAllowed  = "method_not_allowed"  // the path exists, the method does not; the edge's Allow lists those it takes
	EConflict          = "conflict"            // a unique name or path is already taken
	EVersionConflict   = "version_conflict"    // optimistic concurrency: the object changed
	EBodyTooLarge      = "body_too_large"      // request body over the limit
	EUnsupportedMedia  = "unsupported_media_type"
	ERateLimited       = "rate_limited"        // a rate limit was hit; Retry-After says when
	EQuotaExceeded     = "quota_exceeded"      // the period's quota is used up
	EInternal          = "internal"            // a bug or an outage on our side; details are logged
	EUpstreamFailed    = "upstream_failed"     // the upstream refused, reset or sent garbage
	ENotReady          = "not_ready"           // still loading config, shutting down, or the database is unreachable
	EOverloaded        = "overloaded"          // shedding load
	EUpstreamTimeout   = "upstream_timeout"    // the upstream did not answer in time
	ENoHealthyUpstream = "no_healthy_upstream" // edge: every target of the route is out of rotation

	EFunctionFailed      = "function_failed"      // edge: a tenant's function trapped, ran past its time or made a bad host call
	EFunctionBusy        = "function_busy"        // edge: the tenant's functions are at their concurrency cap
	EFunctionUnavailable = "function_unavailable" // edge: a module the route names has not reached this edge
	EAuthorizerDenied    = "authorizer_denied"    // edge: the route's external authorizer refused with a 4xx other than 401 and 403
	EAuthorizerFailed    = "authorizer_failed"    // edge: the route's external authorizer gave no usable answer (fail closed)
)

// CodeInfo describes one error code for the documentation and the status mapping.
type CodeInfo struct {
	Code   string
	Status int
	Where  string // "api", "edge" or "both"
	Means  string
}

// Codes is the whole vocabulary, in the order the README lists it.
var Codes = []CodeInfo{
	{EInvalidRequest, http.StatusBadRequest, "both", "the request is malformed: bad JSON, unknown field, bad query parameter"},
	{EValidation, http.StatusBadRequest, "api", "a field breaks a rule; `field` names it and `message` says which rule"},
	{EInvalidSignature, http.StatusBadRequest, "api", "a webhook (`POST /v1/stripe/webhook`) whose `Stripe-Signature` is missing, wrong or over 5 minutes old"},
	{EUnauthenticated, http.StatusUnauthorized, "both", "no credential was sent"},
	{EInvalidCredential, http.StatusUnauthorized, "both", "the credential is unknown, expired or not valid for this tenant"},
	{EExpiredKey, http.StatusUnauthorized, "edge", "the API key is past its `expires_at`; the consumer needs a new key"},
	{EForbidden, http.StatusForbidden, "both", "the credential may not do this; at the edge, the route's external authorizer said so"},
	{EAccessDenied, http.StatusForbidden, "edge", "the tenant's policy denies this consumer this call"},
	{EAuthorizerDenied, http.StatusForbidden, "edge", "the route's external authorizer refused the call with a 4xx other than 401 and 403; the status is the one it chose, the message its own"},
	{ENotFound, http.StatusNotFound, "api", "no such object, or it belongs to another tenant"},
	{ETenantNotFound, http.StatusNotFound, "edge", "the Host header names no tenant"},
	{ERouteNotFound, http.StatusNotFound, "edge", "no route of the tenant matches the path, whatever the method"},
	{EMisdirected, http.StatusMisdirectedRequest, "edge", "the TLS server name (SNI) and the Host header name different tenants, or the host name is a custom domain whose DNS proof is not verified"},
	{EMethodNotAllowed, http.StatusMethodNotAllowed, "both", "the path exists but not with this method; at the edge, a route matches the path but none takes the method, and `Allow` lists those that do"},
	{EConflict, http.StatusConflict, "api", "a unique value (slug, name, path) is already taken"},
	{EVersionConflict, http.StatusConflict, "api", "the object changed since you read it: re-read and retry"},
	{EBodyTooLarge, http.StatusRequestEntityTooLarge, "both", "the request body is over the size limit"},
	{EUnsupportedMedia, http.StatusUnsupportedMediaType, "api", "the body must be application/json"},
	{ERateLimited, http.StatusTooManyRequests, "both", "a rate limit was hit; retry after `Retry-After` seconds"},
	{EQuotaExceeded, http.StatusTooManyRequests, "edge", "the plan's quota for the period is used up"},
	{EInternal, http.StatusInternalServerError, "both", "something failed on our side; the request id finds it in the logs"},
	{EUpstreamFailed, http.StatusBadGateway, "edge", "the upstream could not be reached or answered badly"},
	{ENotReady, http.StatusServiceUnavailable, "both", "not ready: config still loading, shutting down, or (api) the database unreachable or not answering within `TOLLGATE_DB_TIMEOUT`; retry after `Retry-After` seconds"},
	{EOverloaded, http.StatusServiceUnavailable, "edge", "shedding load to protect other tenants"},
	{ENoHealthyUpstream, http.StatusServiceUnavailable, "edge", "every target of the route is out of rotation: failing health checks, ejected or circuit open"},
	{EAuthorizerFailed, http.StatusServiceUnavailable, "edge", "the route's external authorizer timed out, could not be reached (or is at an address the operator refuses) or answered badly: the call is refused, never let through"},
	{EUpstreamTimeout, http.StatusGatewayTimeout, "edge", "the upstream did not answer within the route's timeout"},
	{EFunctionFailed, http.StatusInternalServerError, "edge", "a function of the route trapped, ran past its time or made a bad host call; the tenant's function log says which and why"},
	{EFunctionBusy, http.StatusServiceUnavailable, "edge", "the tenant's functions are running at their concurrency cap on this edge; retry shortly"},
	{EFunctionUnavailable, http.StatusServiceUnavailable, "edge", "a function module the route names has not reached this edge yet (or cannot start); retry shortly"},
}

var statusByCode = func() map[string]int {
	m := make(map[string]int, len(Codes))
	for _, c := range Codes {
		m[c.Code] = c.Status
	}
	return m
}()

// Status is the HTTP status of an error code; unknown codes are internal errors.
func Status(code string) int {
	if s, ok := statusByCode[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is the one error type that crosses package boundaries with a meaning for clients.
// Any other error reaching an HTTP boundary is reported as EInternal and logged.
type Error struct {
	Code    string
	Message string
	Field   string // the offending field for EValidation, as a JSON path ("upstream.targets[0].url")
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("tollgate %s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("tollgate %s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a validation error about one field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: EValidation, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode is err's code, EInternal when err is not an *Error, "" when err is nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage is the message a client may see: the *Error's own, or "internal error".
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
