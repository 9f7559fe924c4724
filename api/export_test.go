package api

import (
	"time"

	"tollgate/tenants"
)

// Decode runs the decode-and-validate step of one request body kind exactly as its handler
// does (with the default body limit and the zero upstream policy), for the fuzz targets.
// kind is one of BodyKinds.
func Decode(kind, contentType string, body []byte) error {
	const limit = DefaultBodyLimit
	p := &tenants.UpstreamAddressRule{}
	var err error
	switch kind {
	case "tenant":
		_, err = decodeTenantCreate(contentType, body, limit)
	case "tenant_patch":
		var patch *tenantPatch
		if patch, err = decodeTenantPatch(contentType, body, limit); err == nil {
			cur := &tenants.Tenant{ID: "t", Slug: "acme", Name: "Acme", PlatformPlan: "free", Version: 1, CreatedAt: time.Now()}
			_, err = patch.apply(cur)
		}
	case "route":
		_, err = decodeRoute(contentType, body, limit, p)
	case "route_update":
		_, _, err = decodeRouteUpdate(contentType, body, limit, p)
	case "consumer":
		_, err = decodeConsumer(contentType, body, limit)
	case "consumer_update":
		_, _, err = decodeConsumerUpdate(contentType, body, limit)
	case "plan":
		_, err = decodePlan(contentType, body, limit)
	case "plan_update":
		_, _, err = decodePlanUpdate(contentType, body, limit)
	case "token":
		_, err = decodeToken(contentType, body, limit)
	case "key":
		_, err = decodeKey(contentType, body, limit, time.Now())
	case "platform_plan":
		_, _, err = decodePlatformPlan(contentType, body, limit, "gold")
	case "jwt_issuer":
		_, err = decodeJWTIssuer(contentType, body, limit)
	case "jwt_issuer_update":
		_, _, err = decodeJWTIssuerUpdate(contentType, body, limit)
	case "policy":
		_, _, err = decodeAccessRules(contentType, body, limit)
	case "invite":
		_, err = decodeInvite(contentType, body, limit)
	case "invite_token":
		_, err = decodeInviteToken(contentType, body, limit)
	case "config":
		_, err = decodeConfig(contentType, body, limit)
	default:
		panic("api.Decode: unknown kind " + kind)
	}
	return err
}

// BodyKinds are the kinds Decode takes: every request body of the API.
var BodyKinds = []string{"tenant", "tenant_patch", "route", "route_update", "consumer", "consumer_update", "plan", "plan_update", "token", "key", "platform_plan", "jwt_issuer", "jwt_issuer_update", "policy", "invite", "invite_token", "config"}
