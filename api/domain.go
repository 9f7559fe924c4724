package api

import (
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Custom domains (issue 8, TLS): a tenant's own host names with their certificates. The
// private key is write-only: the store keeps it (the edges terminate TLS with it) and no
// response carries it.

type domainBody struct {
	Hostname       string `json:"hostname" required:"true" doc:"A DNS name of at least two labels, not under the edge domain; unique across all tenants (409 conflict)."`
	CertificatePEM string `json:"certificate_pem" required:"true" doc:"PEM certificate chain, the leaf first. The leaf must cover hostname and be valid now."`
	PrivateKeyPEM  string `json:"private_key_pem" required:"true" doc:"PEM private key (PKCS#8, PKCS#1 or SEC 1) matching the leaf. Write-only: never returned."`
}

type domainUpdate struct {
	domainBody
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

func (s *Server) domains() (tenants.DomainService, error) {
	if s.cfg.Domains == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "custom domains are not enabled on this server")
	}
	return s.cfg.Domains, nil
}

// publicDomain is the domain as clients see it: without the private key.
func publicDomain(d *tenants.Domain) *tenants.Domain {
	c := *d
	c.PrivateKeyPEM = ""
	return &c
}

func (s *Server) createDomain(c *fiber.Ctx, r *request) error {
	svc, err := s.domains()
	if err != nil {
		return err
	}
	var b domainBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	d := &tenants.Domain{Hostname: b.Hostname, CertificatePEM: b.CertificatePEM, PrivateKeyPEM: b.PrivateKeyPEM}
	if err := d.Validate(s.cfg.EdgeDomain, time.Now()); err != nil {
		return err
	}
	d.TenantID = r.tenant.ID
	if err := svc.CreateDomain(r.ctx, d); err != nil {
		return err
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/domains/" + d.ID)
	return reply(c, http.StatusCreated, publicDomain(d), d.Version)
}

func (s *Server) listDomains(c *fiber.Ctx, r *request) error {
	svc, err := s.domains()
	if err != nil {
		return err
	}
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	items, next, err := svc.ListDomains(r.ctx, r.tenant.ID, p)
	if err != nil {
		return err
	}
	for i, d := range items {
		items[i] = publicDomain(d)
	}
	return replyList(c, items, next)
}

func (s *Server) getDomain(c *fiber.Ctx, r *request) error {
	svc, err := s.domains()
	if err != nil {
		return err
	}
	id, err := idParam(c, "id", "domain")
	if err != nil {
		return err
	}
	d, err := svc.FindDomain(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, publicDomain(d), d.Version)
}

func (s *Server) putDomain(c *fiber.Ctx, r *request) error {
	svc, err := s.domains()
	if err != nil {
		return err
	}
	id, err := idParam(c, "id", "domain")
	if err != nil {
		return err
	}
	var b domainUpdate
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	d := &tenants.Domain{Hostname: b.Hostname, CertificatePEM: b.CertificatePEM, PrivateKeyPEM: b.PrivateKeyPEM}
	if err := d.Validate(s.cfg.EdgeDomain, time.Now()); err != nil {
		return err
	}
	v, current, err := version(c, b.Version)
	if err != nil {
		return err
	}
	if current {
		cur, err := svc.FindDomain(r.ctx, r.tenant.ID, id)
		if err != nil {
			return err
		}
		v = cur.Version
	}
	d.ID, d.TenantID, d.Version = id, r.tenant.ID, v
	if err := svc.UpdateDomain(r.ctx, d); err != nil {
		return err
	}
	return reply(c, http.StatusOK, publicDomain(d), d.Version)
}

func (s *Server) deleteDomain(c *fiber.Ctx, r *request) error {
	svc, err := s.domains()
	if err != nil {
		return err
	}
	id, err := idParam(c, "id", "domain")
	if err != nil {
		return err
	}
	if err := svc.DeleteDomain(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}
