package api

import (
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

// publicDomain is the domain as clients see it: without the private key.
func publicDomain(d *tenants.Domain) *tenants.Domain {
	c := *d
	c.PrivateKeyPEM = ""
	return &c
}
