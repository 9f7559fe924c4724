package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Who may call an endpoint.
type access int

const (
	// public endpoints take no credential (health, readiness, the OpenAPI document).
	public access = iota
	// adminOnly endpoints take the admin token; a tenant token gets 403.
	adminOnly
	// tenantScoped endpoints carry :slug and take the admin token or a token of that tenant;
	// any other tenant's token gets 404, exactly as if the tenant did not exist.
	tenantScoped
	// anyToken endpoints take any valid token: what they show is the same for everyone
	// (the platform plans).
	anyToken
)

// principal is the authenticated caller: the operator, a token of one tenant, or a console
// user signed in with a session cookie.
type principal struct {
	admin bool
	token *tenants.Token
	user  *tenants.User
}

// request is what a handler gets besides the Fiber context.
type request struct {
	ctx    context.Context
	who    principal
	tenant *tenants.Tenant // the :slug tenant, resolved and authorized; nil if not scoped
	role   string          // the caller's role in tenant ("" for the admin token)
}

type handlerFunc func(c *fiber.Ctx, r *request) error

// maxCredential bounds what is hashed and looked up: real tokens are 36 bytes.
const maxCredential = 256

// wrap turns an endpoint into a Fiber handler: authentication, tenant resolution and scope
// check, then the endpoint's handler, all under the deadline bound gave the request.
func (s *Server) wrap(ep *endpoint) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx := c.UserContext()
		if ep.heavy {
			var cancel context.CancelFunc
			ctx, cancel = s.rebound(c, time.Now())
			defer cancel()
		}
		r := &request{ctx: ctx}
		if ep.access != public {
			who, err := s.authenticate(ctx, c)
			if err != nil {
				return err
			}
			r.who = who
		}
		switch ep.access {
		case adminOnly:
			if !r.who.admin {
				return tenants.Errorf(tenants.EForbidden, "%s %s needs the admin token", ep.method, ep.path)
			}
		case tenantScoped:
			t, role, err := s.scope(ctx, c.Params("slug"), r.who)
			if err != nil {
				return err
			}
			r.tenant, r.role = t, role
			if err := s.authorize(ep, r); err != nil {
				return err
			}
			if ep.heavy {
				release, err := s.heavy.acquire(c, t.ID)
				if err != nil {
					return err
				}
				defer release()
			}
		}
		// Probes and the document ignore query strings; everything else is strict.
		if ep.access != public {
			if err := checkQuery(c, ep.query()); err != nil {
				return err
			}
		}
		s.audit(c, ep, r)
		return ep.handle(c, r)
	}
}

// authenticate reads "Authorization: Bearer <token>" and says who is calling.
func (s *Server) authenticate(ctx context.Context, c *fiber.Ctx) (principal, error) {
	h := c.Get(fiber.HeaderAuthorization)
	if h == "" {
		if who, ok, err := s.sessionPrincipal(ctx, c); ok {
			return who, err
		}
		return principal{}, tenants.Errorf(tenants.EUnauthenticated, "send a token: Authorization: Bearer <token>")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, tenants.Errorf(tenants.EUnauthenticated, "the Authorization header must be \"Bearer <token>\"")
	}
	if len(tok) > maxCredential {
		return principal{}, tenants.Errorf(tenants.EInvalidCredential, "the token is not valid")
	}
	if s.adminHash != nil {
		// Compare digests, so neither the length nor the content of the admin token leaks
		// through timing.
		sum := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(sum[:], s.adminHash) == 1 {
			return principal{admin: true}, nil
		}
	}
	if !strings.HasPrefix(tok, tenants.TokenPrefix) {
		return principal{}, tenants.Errorf(tenants.EInvalidCredential, "the token is not valid")
	}
	t, err := s.cfg.Tokens.FindTokenByHash(ctx, tenants.HashSecret(tok))
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return principal{}, tenants.Errorf(tenants.EInvalidCredential, "the token is not valid")
	}
	if err != nil {
		return principal{}, err
	}
	return principal{token: t}, nil
}

// scope resolves :slug and checks the caller may see it. A tenant that does not exist and
// one the caller may not see get the same answer, so slugs cannot be probed.
// It returns the caller's role in the tenant ("" for the admin token).
func (s *Server) scope(ctx context.Context, slug string, who principal) (*tenants.Tenant, string, error) {
	notFound := tenants.Errorf(tenants.ENotFound, "tenant %q not found", slug)
	if tenants.ValidateSlug(slug) != nil {
		return nil, "", tenants.Errorf(tenants.ENotFound, "tenant not found")
	}
	t, err := s.cfg.Tenants.FindTenant(ctx, slug)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return nil, "", notFound
	}
	if err != nil {
		return nil, "", err
	}
	if who.admin {
		return t, "", nil
	}
	role, err := s.roleIn(ctx, who, t)
	if err != nil {
		return nil, "", err
	}
	if role == "" {
		return nil, "", notFound
	}
	return t, role, nil
}
