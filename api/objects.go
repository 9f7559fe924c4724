package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// collection serves the five endpoints of one kind of tenant-scoped, versioned object
// (routes, consumers, plans, JWT issuers, domains): create, list, get, replace and delete all
// follow the same rules, so they are written once here and each kind says only how it
// is decoded, stored and shown.
type collection[E any] struct {
	name string // in errors: "route", "jwt issuer"
	path string // the path segment under the tenant: "routes", "jwt-issuers"

	// meta points at the object's identity: its id, tenant id and version.
	meta func(*E) (id, tenantID *string, version *int64)
	// decode and decodeUpdate read and validate a request body (an update also returns
	// the version it names, if any).
	decode       func(ct string, body []byte) (*E, error)
	decodeUpdate func(ct string, body []byte) (*E, *int64, error)

	create func(ctx context.Context, v *E) error
	list   func(ctx context.Context, tenantID string, p tenants.Page) ([]*E, string, error)
	// search lists the objects whose name starts with ?q= when a request gives one; nil:
	// the collection takes no ?q=.
	search func(ctx context.Context, tenantID, prefix string, p tenants.Page) ([]*E, string, error)
	find   func(ctx context.Context, tenantID, id string) (*E, error)
	update func(ctx context.Context, v *E) error
	delete func(ctx context.Context, tenantID, id string) error

	// show is what a response shows of an object (an issuer hides its secret); nil: the
	// object itself.
	show func(*E) *E
	// storeErr turns a store error about v into the client's error (a consumer's
	// missing plan is a validation error); nil: as is.
	storeErr func(err error, v *E) error
	// saved notes on an object just created or replaced what the answer should warn of
	// (a plan above the tenant's platform plan); nil: nothing.
	saved func(r *request, v *E)
	// off reports why the kind is not served by this server (custom domains without a
	// domain store), before anything else is looked at; nil: always served.
	off func() error
}

func (k *collection[E]) disabled() error {
	if k.off == nil {
		return nil
	}
	return k.off()
}

func (k *collection[E]) shown(v *E) *E {
	if k.show == nil {
		return v
	}
	return k.show(v)
}

func (k *collection[E]) fail(err error, v *E) error {
	if k.storeErr == nil {
		return err
	}
	return k.storeErr(err, v)
}

func (k *collection[E]) handleCreate(c *fiber.Ctx, r *request) error {
	if err := k.disabled(); err != nil {
		return err
	}
	v, err := k.decode(contentType(c), c.Body())
	if err != nil {
		return err
	}
	id, tenantID, version := k.meta(v)
	*tenantID = r.tenant.ID
	if err := k.create(r.ctx, v); err != nil {
		return k.fail(err, v)
	}
	if k.saved != nil {
		k.saved(r, v)
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/" + k.path + "/" + *id)
	return reply(c, http.StatusCreated, k.shown(v), *version)
}

func (k *collection[E]) handleList(c *fiber.Ctx, r *request) error {
	if err := k.disabled(); err != nil {
		return err
	}
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	list := k.list
	if q := c.Query("q"); q != "" && k.search != nil {
		if len(q) > maxNamePrefix {
			e := tenants.Errorf(tenants.EInvalidRequest, "q is a name prefix: at most %d bytes", maxNamePrefix)
			e.Field = "q"
			return e
		}
		list = func(ctx context.Context, tenantID string, p tenants.Page) ([]*E, string, error) {
			return k.search(ctx, tenantID, q, p)
		}
	}
	items, next, err := list(r.ctx, r.tenant.ID, p)
	if err != nil {
		return err
	}
	for i, v := range items {
		items[i] = k.shown(v)
	}
	return replyList(c, items, next)
}

func (k *collection[E]) handleGet(c *fiber.Ctx, r *request) error {
	if err := k.disabled(); err != nil {
		return err
	}
	id, err := idParam(c, "id", k.name)
	if err != nil {
		return err
	}
	v, err := k.find(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	_, _, version := k.meta(v)
	return reply(c, http.StatusOK, k.shown(v), *version)
}

// handlePut replaces an object, conditional on the version If-Match or the body names
// (If-Match: * means whatever version is current; see version).
func (k *collection[E]) handlePut(c *fiber.Ctx, r *request) error {
	if err := k.disabled(); err != nil {
		return err
	}
	id, err := idParam(c, "id", k.name)
	if err != nil {
		return err
	}
	v, bodyVersion, err := k.decodeUpdate(contentType(c), c.Body())
	if err != nil {
		return err
	}
	base, current, err := version(c, bodyVersion)
	if err != nil {
		return err
	}
	if current {
		cur, err := k.find(r.ctx, r.tenant.ID, id)
		if err != nil {
			return err
		}
		_, _, cv := k.meta(cur)
		base = *cv
	}
	vid, tenantID, vv := k.meta(v)
	*vid, *tenantID, *vv = id, r.tenant.ID, base
	if err := k.update(r.ctx, v); err != nil {
		return k.fail(err, v)
	}
	if k.saved != nil {
		k.saved(r, v)
	}
	return reply(c, http.StatusOK, k.shown(v), *vv)
}

func (k *collection[E]) handleDelete(c *fiber.Ctx, r *request) error {
	if err := k.disabled(); err != nil {
		return err
	}
	id, err := idParam(c, "id", k.name)
	if err != nil {
		return err
	}
	if err := k.delete(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}

// maxNamePrefix bounds ?q=: a name is at most 100 characters, 400 bytes.
const maxNamePrefix = 400

// The collections of the tenant-scoped objects.

func (s *Server) routes() *collection[tenants.Route] {
	limit, policy := s.cfg.BodyLimit, s.cfg.Upstreams
	return &collection[tenants.Route]{
		name: "route", path: "routes",
		meta: func(v *tenants.Route) (*string, *string, *int64) { return &v.ID, &v.TenantID, &v.Version },
		decode: func(ct string, body []byte) (*tenants.Route, error) {
			return decodeRoute(ct, body, limit, policy)
		},
		decodeUpdate: func(ct string, body []byte) (*tenants.Route, *int64, error) {
			return decodeRouteUpdate(ct, body, limit, policy)
		},
		create: s.cfg.Routes.CreateRoute, list: s.cfg.Routes.ListRoutes, search: s.cfg.Routes.SearchRoutes, find: s.cfg.Routes.FindRoute,
		update: s.cfg.Routes.UpdateRoute, delete: s.cfg.Routes.DeleteRoute,
	}
}

func (s *Server) consumers() *collection[tenants.Consumer] {
	limit := s.cfg.BodyLimit
	return &collection[tenants.Consumer]{
		name: "consumer", path: "consumers",
		meta: func(v *tenants.Consumer) (*string, *string, *int64) { return &v.ID, &v.TenantID, &v.Version },
		decode: func(ct string, body []byte) (*tenants.Consumer, error) {
			return decodeConsumer(ct, body, limit)
		},
		decodeUpdate: func(ct string, body []byte) (*tenants.Consumer, *int64, error) {
			return decodeConsumerUpdate(ct, body, limit)
		},
		create: s.cfg.Consumers.CreateConsumer, list: s.cfg.Consumers.ListConsumers, find: s.cfg.Consumers.FindConsumer,
		update: s.cfg.Consumers.UpdateConsumer, delete: s.cfg.Consumers.DeleteConsumer,
		storeErr: planRef,
	}
}

func (s *Server) plans() *collection[tenants.ConsumerPlan] {
	limit := s.cfg.BodyLimit
	return &collection[tenants.ConsumerPlan]{
		name: "plan", path: "plans",
		meta: func(v *tenants.ConsumerPlan) (*string, *string, *int64) { return &v.ID, &v.TenantID, &v.Version },
		decode: func(ct string, body []byte) (*tenants.ConsumerPlan, error) {
			return decodePlan(ct, body, limit)
		},
		decodeUpdate: func(ct string, body []byte) (*tenants.ConsumerPlan, *int64, error) {
			return decodePlanUpdate(ct, body, limit)
		},
		create: s.cfg.Plans.CreatePlan, list: s.cfg.Plans.ListPlans, find: s.cfg.Plans.FindPlan,
		update: s.cfg.Plans.UpdatePlan, delete: s.cfg.Plans.DeletePlan,
		saved: func(r *request, v *tenants.ConsumerPlan) {
			v.Warnings = tenants.PlanWarnings(v, r.tenant.Limits)
		},
	}
}

func (s *Server) jwtIssuers() *collection[tenants.Issuer] {
	limit := s.cfg.BodyLimit
	return &collection[tenants.Issuer]{
		name: "jwt issuer", path: "jwt-issuers",
		meta: func(v *tenants.Issuer) (*string, *string, *int64) { return &v.ID, &v.TenantID, &v.Version },
		decode: func(ct string, body []byte) (*tenants.Issuer, error) {
			return decodeJWTIssuer(ct, body, limit)
		},
		decodeUpdate: func(ct string, body []byte) (*tenants.Issuer, *int64, error) {
			return decodeJWTIssuerUpdate(ct, body, limit)
		},
		create: s.cfg.JWTIssuers.CreateJWTIssuer, list: s.cfg.JWTIssuers.ListJWTIssuers, find: s.cfg.JWTIssuers.FindJWTIssuer,
		update: s.cfg.JWTIssuers.UpdateJWTIssuer, delete: s.cfg.JWTIssuers.DeleteJWTIssuer,
		show: publicIssuer,
	}
}

func (s *Server) domains() *collection[tenants.Domain] {
	limit, edgeDomain := s.cfg.BodyLimit, s.cfg.EdgeDomain
	validate := func(d *tenants.Domain) (*tenants.Domain, error) {
		if err := d.Validate(edgeDomain, time.Now()); err != nil {
			return nil, err
		}
		return d, nil
	}
	// The store is used through closures: a server without one answers through off,
	// and the collection never touches it.
	return &collection[tenants.Domain]{
		name: "domain", path: "domains",
		meta: func(v *tenants.Domain) (*string, *string, *int64) { return &v.ID, &v.TenantID, &v.Version },
		decode: func(ct string, body []byte) (*tenants.Domain, error) {
			var d tenants.Domain
			if err := decodeBody(ct, body, limit, &d, false); err != nil {
				return nil, err
			}
			return validate(&d)
		},
		decodeUpdate: func(ct string, body []byte) (*tenants.Domain, *int64, error) {
			var b domainUpdate
			if err := decodeBody(ct, body, limit, &b, false); err != nil {
				return nil, nil, err
			}
			d, err := validate(&b.Domain)
			return d, b.Version, err
		},
		create: s.createDomain,
		list: func(ctx context.Context, tenantID string, p tenants.Page) ([]*tenants.Domain, string, error) {
			return s.cfg.Domains.ListDomains(ctx, tenantID, p)
		},
		find: func(ctx context.Context, tenantID, id string) (*tenants.Domain, error) {
			return s.cfg.Domains.FindDomain(ctx, tenantID, id)
		},
		update: s.updateDomain,
		delete: func(ctx context.Context, tenantID, id string) error {
			return s.cfg.Domains.DeleteDomain(ctx, tenantID, id)
		},
		show: publicDomain,
		off: func() error {
			if s.cfg.Domains == nil {
				return tenants.Errorf(tenants.ENotFound, "custom domains are not enabled on this server")
			}
			return nil
		},
	}
}
