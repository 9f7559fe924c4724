package api

import (
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// The tenant's access rules: one set per tenant, replaced whole by PUT. It is validated by
// compiling it with the engine the edges run (accessrules), so what the api accepts the
// edges can enforce, and its errors name the rule at fault ("rules[2][1]").

// accessRulesPut is the body of PUT: the access rules and the version they replace.
type accessRulesPut struct {
	tenants.AccessRules
	// Version makes the replacement conditional; without it (and without If-Match) PUT
	// replaces whatever is current.
	Version *int64 `json:"version" doc:"Replace only at this version; or send If-Match. Optional: without either, PUT replaces whatever is current."`
}

func decodeAccessRules(ct string, body []byte, limit int) (*tenants.AccessRules, *int64, error) {
	var b accessRulesPut
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	if b.Rules == nil {
		return nil, nil, tenants.Invalid("rules", "is required: a list of rules, [] for none (then every call to a policy route is denied)")
	}
	if _, err := accessrules.Compile(b.Rules, b.Roles); err != nil {
		return nil, nil, err
	}
	if b.Roles == nil {
		b.Roles = [][]string{}
	}
	return &b.AccessRules, b.Version, nil
}

func (s *Server) getAccessRules(c *fiber.Ctx, r *request) error {
	p, err := s.cfg.AccessRules.FindAccessRules(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}

func (s *Server) putAccessRules(c *fiber.Ctx, r *request) error {
	p, bodyVersion, err := decodeAccessRules(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	var v int64
	if bodyVersion != nil || strings.TrimSpace(c.Get(fiber.HeaderIfMatch)) != "" {
		n, any, err := version(c, bodyVersion)
		if err != nil {
			return err
		}
		if !any {
			v = n
		}
	}
	p.TenantID, p.Version = r.tenant.ID, v
	if err := s.cfg.AccessRules.PutAccessRules(r.ctx, p); err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}
