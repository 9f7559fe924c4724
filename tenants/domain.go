package tenants

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"strings"
	"time"
)

// Domain is a tenant's custom host name with the certificate the edge presents for it:
// requests for Hostname reach the tenant as {slug}.{edge domain} does, on the plain and
// the TLS listener, and a TLS handshake naming Hostname in SNI gets this certificate.
//
// PrivateKeyPEM is write-only in the API. It travels in the domain's config entry (the
// edges need it to terminate TLS), so anyone who can read the KV bucket can read it: the
// bucket must be as closely guarded as the certificates' keys themselves.
type Domain struct {
	ID             string `json:"id"`
	TenantID       string `json:"tenant_id"`
	Hostname       string `json:"hostname"`
	CertificatePEM string `json:"certificate_pem"`
	PrivateKeyPEM  string `json:"private_key_pem,omitempty"`
	// NotAfter is when the certificate (the leaf) expires; read-only.
	NotAfter  time.Time `json:"not_after"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxDomainPEMBytes bounds each PEM field of a domain (a chain of a few certificates).
const MaxDomainPEMBytes = 64 << 10

// MaxDomainsPerTenant bounds a tenant's custom domains.
const MaxDomainsPerTenant = 100

// Validate normalizes the host name (lower case, no trailing dot) and checks the domain:
// a DNS name of at least two labels that is not the edge domain nor under it (when
// edgeDomain is not empty), and a certificate chain that parses, matches the private key,
// covers the host name and is valid at now. It fills in NotAfter. EValidation.
func (d *Domain) Validate(edgeDomain string, now time.Time) error {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d.Hostname)), ".")
	switch {
	case h == "":
		return Invalid("hostname", "is required")
	case !validHostname(h) || strings.Contains(h, "_") || !strings.Contains(h, "."):
		return Invalid("hostname", "must be a DNS name of at least two labels (a-z, 0-9, '-'), got %q", d.Hostname)
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return Invalid("hostname", "must be a DNS name, not an IP address")
	}
	if ed := strings.TrimSuffix(strings.ToLower(edgeDomain), "."); ed != "" && (h == ed || strings.HasSuffix(h, "."+ed)) {
		return Invalid("hostname", "%q is under the edge domain %s, which the service's own certificate covers", h, ed)
	}
	d.Hostname = h
	if d.CertificatePEM == "" {
		return Invalid("certificate_pem", "is required")
	}
	if d.PrivateKeyPEM == "" {
		return Invalid("private_key_pem", "is required")
	}
	if len(d.CertificatePEM) > MaxDomainPEMBytes {
		return Invalid("certificate_pem", "must be at most %d bytes", MaxDomainPEMBytes)
	}
	if len(d.PrivateKeyPEM) > MaxDomainPEMBytes {
		return Invalid("private_key_pem", "must be at most %d bytes", MaxDomainPEMBytes)
	}
	if b, _ := pem.Decode([]byte(d.CertificatePEM)); b == nil || b.Type != "CERTIFICATE" {
		return Invalid("certificate_pem", "must be PEM: one or more CERTIFICATE blocks, the leaf first")
	}
	if b, _ := pem.Decode([]byte(d.PrivateKeyPEM)); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return Invalid("private_key_pem", "must be one PEM PRIVATE KEY block (PKCS#8, PKCS#1 or SEC 1)")
	}
	leaf, err := d.KeyPair()
	if err != nil {
		return err
	}
	if err := leaf.Leaf.VerifyHostname(h); err != nil {
		return Invalid("certificate_pem", "the certificate does not cover %q (its names: %s)", h, strings.Join(leaf.Leaf.DNSNames, ", "))
	}
	switch {
	case now.After(leaf.Leaf.NotAfter):
		return Invalid("certificate_pem", "the certificate expired at %s", leaf.Leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.Leaf.NotBefore):
		return Invalid("certificate_pem", "the certificate is not valid before %s", leaf.Leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	d.NotAfter = leaf.Leaf.NotAfter.UTC()
	return nil
}

// KeyPair parses the domain's certificate chain and key into what a TLS server presents,
// with Leaf set. EValidation when they do not parse or do not match.
func (d *Domain) KeyPair() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair([]byte(d.CertificatePEM), []byte(d.PrivateKeyPEM))
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "private key does not match") {
			return nil, Invalid("private_key_pem", "the private key does not match the certificate")
		}
		return nil, Invalid("certificate_pem", "the certificate and key do not parse: %s", strings.TrimPrefix(msg, "tls: "))
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, Invalid("certificate_pem", "the certificate does not parse: %v", err)
		}
	}
	return &c, nil
}

// DomainService manages tenants' custom domains.
type DomainService interface {
	// CreateDomain stores a validated domain (see Domain.Validate) with a new id.
	// EValidation (also past MaxDomainsPerTenant), EConflict (the host name belongs to a
	// tenant already, this one or another), ENotFound (tenant).
	CreateDomain(ctx context.Context, d *Domain) error
	// FindDomain and ListDomains return domains with their private keys; the api keeps
	// the keys from clients. ENotFound.
	FindDomain(ctx context.Context, tenantID, id string) (*Domain, error)
	ListDomains(ctx context.Context, tenantID string, p Page) ([]*Domain, string, error)
	// UpdateDomain replaces the domain (host name, certificate and key: a renewal) when
	// d.Version is current. ENotFound, EVersionConflict, EConflict, EValidation.
	UpdateDomain(ctx context.Context, d *Domain) error
	// DeleteDomain: ENotFound.
	DeleteDomain(ctx context.Context, tenantID, id string) error
}
