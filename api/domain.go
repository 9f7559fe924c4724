package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Custom domains: a tenant's own host names with their certificates. A domain is a claim
// until the DNS TXT record of its verification object is seen (by the automatic checks
// or POST .../verify); only then do the edges serve it. The private key is write-only:
// the store keeps it (the edges terminate TLS with it) and no response carries it.

// domainUpdate is a domain as PUT takes it (a request body is a tenants.Domain, of which
// a client sets the host name, the certificate and the key).
type domainUpdate struct {
	tenants.Domain
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

// domainVerifyBody is the optional body of a verify call: nothing, but an object is
// accepted so clients may always send one.
type domainVerifyBody struct{}

// publicDomain is the domain as clients see it: without the private key.
func publicDomain(d *tenants.Domain) *tenants.Domain {
	c := *d
	c.PrivateKeyPEM = ""
	return &c
}

// firstCheck is when a new claim is first checked: not at once, since its token is only
// now shown and cannot be in DNS yet, and an early miss could sit in a resolver's
// negative cache after the record is published.
func (s *Server) firstCheck() *time.Time {
	t := time.Now().Add(s.cfg.DomainChecks.WithDefaults().PendingMin)
	return &t
}

func (s *Server) createDomain(ctx context.Context, d *tenants.Domain) error {
	d.NextCheckAt = s.firstCheck()
	return s.cfg.Domains.CreateDomain(ctx, d)
}

func (s *Server) updateDomain(ctx context.Context, d *tenants.Domain) error {
	d.NextCheckAt = s.firstCheck() // used only when the host name changes: a new claim
	return s.cfg.Domains.UpdateDomain(ctx, d)
}

// verifyDomain checks the domain's proof now and answers the domain as the check left it:
// verified, or pending with last_error saying why.
func (s *Server) verifyDomain(c *fiber.Ctx, r *request) error {
	if s.cfg.Domains == nil || s.cfg.Proofs == nil {
		return tenants.Errorf(tenants.ENotFound, "custom domain verification is not enabled on this server")
	}
	var b domainVerifyBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, true); err != nil {
		return err
	}
	id, err := idParam(c, "id", "domain")
	if err != nil {
		return err
	}
	d, err := s.cfg.Domains.FindDomain(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	token := d.Verification.Value
	p := s.cfg.Proofs.CheckProof(r.ctx, d.Hostname, token)
	saved, err := s.cfg.Domains.RecordProof(r.ctx, d.TenantID, d.ID, token, p, time.Now(), s.cfg.DomainChecks, true)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, publicDomain(saved), saved.Version)
}
