package edge

import (
	"errors"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/jwtauth"
	"tollgate/edge/routing"
	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// JWT authentication and the tenant's access rules at the edge.
//
// A tenant's compile turns its jwt-issuer entries into one jwtauth.Verifier and its
// access rules (the API's "policy" entry) into one accessrules.Enforcer, both kept in the
// snapshot (and carried over to the next compile while their entries are unchanged, so a
// route change keeps the verified-token and decision caches). An issuer entry the edge
// cannot use is left out and logged; a verifier or access rules that do not compile are
// nil. Either way the routes that need them fail closed: 401 for a token, 403 for the
// access rules.
//
// Per request, a route's chain is the one chain.go builds: authentication, access rules,
// flow control, cache, body limit, transforms, proxy.
//   - "jwt": the token is the Authorization header's value after a case-insensitive
//     "Bearer " (spaces around it trimmed). None → 401 unauthenticated. Any verification
//     failure → 401 invalid_credential with one fixed message, whatever failed: the body
//     never says which check failed nor echoes the token; the reason goes to
//     tollgate_edge_auth_rejected_total and, at debug level, the log (category only).
//   - "key_or_jwt": X-API-Key when the header is present (then exactly as "key"),
//     otherwise the bearer token.
//   - A JWT caller is, for flow control and metering, the consumer "<iss>|<consumer
//     claim>" (never a metric label); the upstream gets X-Consumer-Id: <iss>|<consumer
//     claim> and X-Consumer-Name: <consumer claim>, as a key's consumer gets its id and
//     name. The Authorization header itself is passed on unchanged.
//   - "policy": true (Route.CheckAccess): the tenant's access rules decide on (subjects,
//     method, path), where the subjects are a key consumer's id and name, or a JWT
//     caller's "<iss>|<consumer claim>", its consumer claim and its roles (the bare claim
//     shares one namespace with key consumers' names and with roles: a rule naming
//     "<iss>|<sub>" cannot be met by another issuer's token), and the path is the
//     normalized request path exactly as the upstream receives it before strip_prefix
//     (see routing.NormalizePath and package accessrules). No access rules, no identity
//     (auth "none") or no allowing rule → 403 policy_denied (authorize.go).

var (
	replyNoBearer      = newReply(tenants.EUnauthenticated, "this API needs a JWT in the Authorization header (Bearer)")
	replyNoCredential  = newReply(tenants.EUnauthenticated, "this API needs a key in the X-API-Key header or a JWT in the Authorization header (Bearer)")
	replyBadJWT        = newReply(jwtauth.Code, jwtauth.Message)
	replyAccessDenied  = newReply(tenants.EAccessDenied, "the API's policy does not allow this call")
	hdrAuthorization   = []byte("Authorization")
	hdrWWWAuthenticate = []byte("WWW-Authenticate")
	strBearer          = []byte("Bearer")
)

// Reasons of tollgate_edge_auth_rejected_total.
const (
	rejNoToken = iota
	rejMalformed
	rejUntrusted
	rejExpired
	rejClaims
	rejNoKeys
	rejNoVerifier
	rejAccess
	numRejReasons
)

// replyBadJWTFor is replyBadJWT with the refusal's category in words for the request
// log; the client is told the same whatever it is.
var replyBadJWTFor = func() (out [numRejReasons]*reply) {
	for i, why := range [numRejReasons]string{"no token", "it is not a well-formed JWT", "no key of this API's issuers verifies it (unknown issuer, algorithm or key, or a bad signature)",
		"it has expired or is not valid yet", "a claim is missing or wrong (exp, aud, the consumer or roles claim)", "the issuer's key set could not be fetched", "this API has no usable JWT issuer", "denied by policy"} {
		r := *replyBadJWT
		r.message, out[i] = "the JWT was refused: "+why, &r
	}
	return out
}()

var rejReasons = [numRejReasons]string{"no_token", "malformed", "untrusted", "expired", "claims", "no_keys", "no_issuers", "policy_denied"}

// authMetrics counts refusals of JWT authentication and access rules, by reason.
type authMetrics struct {
	rejected [numRejReasons]prometheus.Counter
}

// initAuth creates the process's JWKS cache and the auth metrics.
func (e *Edge) initAuth() error {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_edge_auth_rejected_total",
		Help: "Requests refused by JWT authentication or policy, by reason (no_token, malformed, untrusted, expired, claims, no_keys, no_issuers, policy_denied).",
	}, []string{"reason"})
	if err := e.cfg.Registry.Register(v); err != nil {
		return err
	}
	e.auth = &authMetrics{}
	for i, r := range rejReasons {
		e.auth.rejected[i] = v.WithLabelValues(r)
	}
	jc := e.cfg.JWKS
	if jc.CheckAddr == nil {
		jc.CheckAddr = e.cfg.AddressRule.CheckAddr
	}
	if jc.Logger == nil {
		jc.Logger = e.log
	}
	e.jwks = jwtauth.NewJWKSCache(jc)
	return nil
}

// compiledAuth is what a tenant's compiles carry over (compiler-owned, in compiled): the
// verifier and enforcer with the entries they were built from.
type compiledAuth struct {
	issuers     []*tenants.Issuer // sorted by id
	verifier    *jwtauth.Verifier
	accessRules *tenants.AccessRules
	enforcer    *accessrules.Enforcer
}

// compileAuth builds (or keeps) the tenant's verifier and enforcer.
func (e *Edge) compileAuth(s *Snapshot, v *tenantView, c *compiledAuth) {
	issuers := slices.Clone(v.issuers)
	sort.Slice(issuers, func(i, j int) bool { return issuers[i].ID < issuers[j].ID })
	if !slices.Equal(issuers, c.issuers) {
		c.issuers, c.verifier = issuers, e.newVerifier(s, issuers)
	}
	if v.accessRules != c.accessRules {
		c.accessRules, c.enforcer = v.accessRules, nil
		if p := v.accessRules; p != nil {
			enf, err := accessrules.Compile(p.Rules, p.Roles)
			if err != nil {
				e.log.Error("edge: tenant access rules do not compile; routes that check access deny every call", "tenant", s.Slug, "err", err)
			} else {
				c.enforcer = enf
			}
		}
	}
	s.jwt, s.accessRules = c.verifier, c.enforcer
}

// newVerifier compiles the issuers the edge can use, leaving out (and logging) the rest,
// so one bad entry does not take the tenant's other issuers down.
func (e *Edge) newVerifier(s *Snapshot, entries []*tenants.Issuer) *jwtauth.Verifier {
	if len(entries) == 0 {
		return nil
	}
	issuers := make([]tenants.Issuer, 0, len(entries))
	seen := make(map[string]string, len(entries))
	for _, ent := range entries {
		is := *ent
		if err := is.ValidateWithLoopback(e.cfg.JWKS.AllowHTTPLoopback); err != nil {
			e.log.Error("edge: jwt issuer skipped", "tenant", s.Slug, "issuer_id", is.ID, "err", err)
			continue
		}
		if other, dup := seen[is.Issuer]; dup {
			e.log.Error("edge: jwt issuer skipped: another entry has the same iss", "tenant", s.Slug, "issuer_id", is.ID, "kept", other)
			continue
		}
		if len(issuers) == tenants.MaxIssuersPerTenant {
			e.log.Error("edge: jwt issuers over the limit skipped", "tenant", s.Slug, "limit", tenants.MaxIssuersPerTenant)
			break
		}
		seen[is.Issuer] = is.ID
		issuers = append(issuers, is)
	}
	if len(issuers) == 0 {
		return nil
	}
	vf, err := jwtauth.NewVerifier(s.TenantID, issuers, jwtauth.Options{JWKS: e.jwks})
	if err != nil {
		e.log.Error("edge: jwt issuers do not compile; jwt routes refuse every token", "tenant", s.Slug, "err", err)
		return nil
	}
	return vf
}

// bearer returns the token of an "Authorization: Bearer <token>" header, or nil.
func bearer(h []byte) []byte {
	if len(h) < len(strBearer)+1 || !routing.ASCIIEqualFold(h[:len(strBearer)], "bearer") || h[len(strBearer)] != ' ' {
		return nil
	}
	t := h[len(strBearer)+1:]
	for len(t) > 0 && (t[0] == ' ' || t[0] == '\t') {
		t = t[1:]
	}
	for len(t) > 0 && (t[len(t)-1] == ' ' || t[len(t)-1] == '\t') {
		t = t[:len(t)-1]
	}
	return t
}

// jwtAuthStep authenticates a request by its bearer token.
func (e *Edge) jwtAuthStep(rt *route, next handler) handler {
	return e.bearerStep(rt, replyNoBearer, next)
}

// bearerStep authenticates a request by its bearer token; missing answers a request
// without one.
func (e *Edge) bearerStep(rt *route, missing *reply, next handler) handler {
	s := rt.snapshot
	rejected := &e.auth.rejected
	var claim *jwtauth.ClaimMatch // the route's canary matches on a claim (canary.go)
	if rt.canary != nil {
		claim = rt.canary.claim
	}
	return func(x *exchange) {
		tok := bearer(x.ctx.Request.Header.PeekBytes(hdrAuthorization))
		if len(tok) == 0 {
			rejected[rejNoToken].Inc()
			x.failBearer(missing)
			return
		}
		v := s.jwt
		if v == nil {
			rejected[rejNoVerifier].Inc()
			x.failBearer(replyBadJWTFor[rejNoVerifier])
			return
		}
		id, err := v.Verify(tok, x.ctx.Time())
		if err != nil {
			r := rejReason(err)
			rejected[r].Inc()
			if e.debug {
				// The category only: the error's detail may quote claims of the token.
				e.log.Debug("edge: token refused", "tenant", s.Slug, "route", rt.name,
					"request_id", string(x.reqID), "reason", rejReasons[r])
			}
			x.failBearer(replyBadJWTFor[r])
			return
		}
		x.setJWTCaller(&id)
		if claim != nil {
			x.noteCanaryClaim(claim, tok)
		}
		next(x)
	}
}

// keyOrJWTAuthStep takes X-API-Key when the request has the header, else the bearer
// token.
func (e *Edge) keyOrJWTAuthStep(rt *route, next handler) handler {
	key := keyAuthStep(rt, next)
	jwt := e.bearerStep(rt, replyNoCredential, next)
	return func(x *exchange) {
		if x.hs.has&hXAPIKey != 0 {
			key(x)
			return
		}
		jwt(x)
	}
}

func rejReason(err error) int {
	switch {
	case errors.Is(err, jwtauth.ErrMalformed):
		return rejMalformed
	case errors.Is(err, jwtauth.ErrExpired):
		return rejExpired
	case errors.Is(err, jwtauth.ErrClaims):
		return rejClaims
	case errors.Is(err, jwtauth.ErrNoKeys):
		return rejNoKeys
	}
	return rejUntrusted
}

// failBearer answers 401 with the challenge RFC 6750 asks for.
func (x *exchange) failBearer(r *reply) {
	x.fail(r)
	x.ctx.Response.Header.SetCanonical(hdrWWWAuthenticate, strBearer)
}

// setJWTCaller makes a verified token's identity the request's consumer. The exchange
// owns the Consumer and its buffers, so nothing is allocated; they are valid until the
// exchange is reset.
func (x *exchange) setJWTCaller(id *jwtauth.Identity) {
	c := &x.jwt
	c.ID, c.Name, c.Plan = id.ID, id.Consumer, nil
	c.id = append(c.id[:0], id.ID...)
	c.name = append(c.name[:0], id.Consumer...)
	c.subjects = append(append(c.subjects[:0], id.ID, id.Consumer), id.Roles...)
	x.consumer = c
}
