package tenants

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Domain is a tenant's custom host name with the certificate the edge presents for it.
// Once verified, requests for Hostname reach the tenant as {slug}.{edge domain} does, on
// the plain and the TLS listener, and a TLS handshake naming Hostname in SNI gets this
// certificate. Until then it is a claim: the edges answer its name with 421.
//
// A claim is verified by a DNS TXT record only whoever controls the name's zone can
// publish: Verification.RecordName holding Verification.Value, a random token of this
// claim. Several tenants may claim one name (so a squatter cannot block its owner), each
// with its own token; at most one claim per name is verified at a time.
//
// PrivateKeyPEM is write-only in the API. It travels in the domain's config entry (the
// edges need it to terminate TLS), so anyone who can read the KV bucket can read it: the
// bucket must be as closely guarded as the certificates' keys themselves.
//
// It is also the API's body (the tags are Route's): a request sets the host name, the
// certificate and the key; the rest is the claim's state, which the server keeps.
type Domain struct {
	ID             string `json:"id" readonly:"true"`
	TenantID       string `json:"tenant_id" readonly:"true"`
	Hostname       string `json:"hostname" required:"true" doc:"A DNS name of at least two labels, not under the edge domain. Several tenants may claim one name; only one claim of it can be verified (409 conflict when another tenant's is), and a tenant claims a name once."`
	CertificatePEM string `json:"certificate_pem" required:"true" doc:"PEM certificate chain, the leaf first. The leaf must cover hostname and be valid now."`
	PrivateKeyPEM  string `json:"private_key_pem,omitempty" required:"true" doc:"PEM private key (PKCS#8, PKCS#1 or SEC 1) matching the leaf. Write-only: never returned."`
	// NotAfter is when the certificate (the leaf) expires; read-only.
	NotAfter time.Time `json:"not_after" readonly:"true"`

	// Status is DomainPending or DomainVerified; read-only. An entry without one (written
	// before domains were verified) counts as pending.
	Status string `json:"status" readonly:"true" doc:"pending until the DNS TXT record of verification is seen; the edges serve only verified domains."`
	// Verification is the DNS record that proves the claim; read-only. The record must
	// stay in place while the domain is used: verified domains are checked again.
	Verification *DomainVerification `json:"verification,omitempty" readonly:"true" doc:"The DNS record that proves the claim. Keep it published: verified domains are checked again hourly, and go back to pending after 3 checks in a row miss it."`
	// VerifiedAt is when the proof was first seen (since the domain last became
	// verified); CheckedAt when it was last looked for; NextCheckAt when it will be
	// looked for next (absent: no automatic check is scheduled). Read-only.
	VerifiedAt  *time.Time `json:"verified_at,omitempty" readonly:"true"`
	CheckedAt   *time.Time `json:"checked_at,omitempty" readonly:"true"`
	NextCheckAt *time.Time `json:"next_check_at,omitempty" readonly:"true" doc:"When the next automatic check runs; absent when none is scheduled (pending for 7 days: POST .../verify)."`
	// LastError says why the last check did not see the proof; empty after one that did.
	LastError string `json:"last_error,omitempty" readonly:"true" doc:"Why the last check did not see the proof; absent after one that did."`
	// Failures counts the consecutive checks that did not see the proof, and
	// PendingSince is when the domain last became pending: the schedule's inputs, kept
	// by the store, not shown.
	Failures     int       `json:"-"`
	PendingSince time.Time `json:"-"`

	Version   int64     `json:"version" readonly:"true" doc:"Bumped by every change, including a change of status; the ETag. Send it back in If-Match."`
	CreatedAt time.Time `json:"created_at" readonly:"true"`
	UpdatedAt time.Time `json:"updated_at" readonly:"true"`
}

// Domain statuses.
const (
	DomainPending  = "pending"
	DomainVerified = "verified"
)

// DomainChallengePrefix is the label under which a claim's TXT record is looked for:
// the record of api.acme.com is _tollgate-challenge.api.acme.com.
const DomainChallengePrefix = "_tollgate-challenge."

// DomainVerification is the DNS record that proves a claim.
type DomainVerification struct {
	// RecordName is the name to publish the record at: DomainChallengePrefix + hostname.
	RecordName string `json:"record_name"`
	// RecordType is always TXT.
	RecordType string `json:"record_type"`
	// Value is the claim's token: the TXT record's whole text.
	Value string `json:"value"`
}

// NewDomainVerification is the record that proves a claim of hostname with token.
func NewDomainVerification(hostname, token string) *DomainVerification {
	return &DomainVerification{RecordName: DomainChallengePrefix + hostname, RecordType: "TXT", Value: token}
}

// Verified reports whether the edges may serve the domain.
func (d *Domain) Verified() bool { return d.Status == DomainVerified }

// ProofOutcome is what one look for a claim's TXT record found.
type ProofOutcome int

const (
	// ProofFound: a TXT record at the challenge name holds the claim's token.
	ProofFound ProofOutcome = iota + 1
	// ProofMissing: the resolver answered that the challenge name has no TXT record.
	ProofMissing
	// ProofMismatch: TXT records exist there, none holds the claim's token.
	ProofMismatch
	// ProofTaken: the proof is there, but another tenant's claim of the name is verified.
	ProofTaken
	// ProofUnresolved: no answer (timeout, SERVFAIL, the resolver unreachable). It says
	// nothing about the claim, so it never counts against a verified domain.
	ProofUnresolved
)

// Proof is the outcome of one check of a claim, with the reason shown to the tenant
// when it did not find the proof.
type Proof struct {
	Outcome ProofOutcome
	Reason  string
}

// DomainSchedule is when claims are checked. A zero field takes its default (see
// WithDefaults); tests shorten them.
type DomainSchedule struct {
	// PendingMin is how long after a claim its first automatic check runs, and the first
	// wait between failed checks of a pending domain; the wait doubles after each failure
	// up to PendingMax. Defaults: 10s and 10m.
	PendingMin time.Duration
	PendingMax time.Duration
	// GiveUp is how long a domain stays pending before automatic checks stop (a verify
	// call starts them again). Default: 7 days.
	GiveUp time.Duration
	// Recheck is how often a verified domain's proof is checked again. Default: 1h.
	Recheck time.Duration
	// Failures is how many consecutive re-checks of a verified domain must miss its
	// proof (no record, or not its token) before it goes back to pending. One miss can
	// be a zone edit in flight or a lagging name server; three in a row, an hour apart,
	// is a record that is gone. Unresolved checks do not count. Default: 3.
	Failures int
}

// Defaults of DomainSchedule.
const (
	DefaultDomainPendingMin = 10 * time.Second
	DefaultDomainPendingMax = 10 * time.Minute
	DefaultDomainGiveUp     = 7 * 24 * time.Hour
	DefaultDomainRecheck    = time.Hour
	DefaultDomainFailures   = 3
)

// WithDefaults fills in the zero fields.
func (s DomainSchedule) WithDefaults() DomainSchedule {
	if s.PendingMin <= 0 {
		s.PendingMin = DefaultDomainPendingMin
	}
	if s.PendingMax <= 0 {
		s.PendingMax = DefaultDomainPendingMax
	}
	s.PendingMax = max(s.PendingMax, s.PendingMin)
	if s.GiveUp <= 0 {
		s.GiveUp = DefaultDomainGiveUp
	}
	if s.Recheck <= 0 {
		s.Recheck = DefaultDomainRecheck
	}
	if s.Failures <= 0 {
		s.Failures = DefaultDomainFailures
	}
	return s
}

// backoff is the wait after the n-th consecutive failed check of a pending domain.
func (s DomainSchedule) backoff(n int) time.Duration {
	d := s.PendingMin
	for i := 1; i < n && d < s.PendingMax; i++ {
		d *= 2
	}
	return min(d, s.PendingMax)
}

// ApplyProof records a check of the domain made at now, moves it between pending and
// verified by the rules of s (see DomainSchedule) and schedules its next automatic
// check. manual marks a check the tenant asked for: on a pending domain it starts the
// backoff and the give-up window afresh, since the tenant says the record is there now.
// It reports whether the status changed (which the edges must learn).
func (d *Domain) ApplyProof(p Proof, now time.Time, s DomainSchedule, manual bool) (changed bool) {
	s = s.WithDefaults()
	now = now.UTC()
	checked := now
	d.CheckedAt = &checked
	if d.Status != DomainVerified {
		d.Status = DomainPending
		if manual || d.PendingSince.IsZero() {
			d.PendingSince, d.Failures = now, 0
		}
	}
	next := func(after time.Duration) {
		t := now.Add(after)
		d.NextCheckAt = &t
	}
	if p.Outcome == ProofFound {
		changed = d.Status != DomainVerified
		if changed {
			d.Status, d.VerifiedAt = DomainVerified, &checked
		}
		d.Failures, d.LastError = 0, ""
		next(s.Recheck)
		return changed
	}
	// A domain that lost its verification keeps saying so on the failed checks that
	// follow, so the tenant reading it later still learns why the edges stopped serving it.
	demoted := d.Status == DomainPending && strings.Contains(d.LastError, pendingAgain)
	d.LastError = p.Reason
	if demoted {
		d.LastError += " (it was verified before" + pendingAgain + ")"
	}
	if d.Status == DomainVerified {
		if p.Outcome != ProofUnresolved {
			d.Failures++
		}
		if d.Failures < s.Failures {
			next(s.Recheck)
			return false
		}
		d.Status, d.VerifiedAt, d.PendingSince, d.Failures = DomainPending, nil, now, 0
		d.LastError = fmt.Sprintf("%s (%d checks in a row)%s", p.Reason, s.Failures, pendingAgain)
		changed = true
	}
	d.Failures++
	if now.Sub(d.PendingSince) >= s.GiveUp {
		d.NextCheckAt = nil
		d.LastError += fmt.Sprintf("; automatic checks stopped after %s pending: POST .../verify to check again", s.GiveUp)
		return changed
	}
	next(s.backoff(d.Failures))
	return changed
}

const pendingAgain = ": the domain is pending again and the edges no longer serve it"

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
	// CreateDomain stores a validated domain (see Domain.Validate) with a new id, as a
	// pending claim with a new token; its first automatic check is at d.NextCheckAt
	// (nil: at once). EValidation (also past MaxDomainsPerTenant), EConflict (the tenant
	// has the host name already, or another tenant's claim of it is verified),
	// ENotFound (tenant).
	CreateDomain(ctx context.Context, d *Domain) error
	// FindDomain and ListDomains return domains with their private keys; the api keeps
	// the keys from clients. ENotFound.
	FindDomain(ctx context.Context, tenantID, id string) (*Domain, error)
	ListDomains(ctx context.Context, tenantID string, p Page) ([]*Domain, string, error)
	// UpdateDomain replaces the domain (host name, certificate and key: a renewal) when
	// d.Version is current. A renewal keeps the status; a new host name is a new claim
	// (pending, a new token, first check at d.NextCheckAt). ENotFound,
	// EVersionConflict, EConflict, EValidation.
	UpdateDomain(ctx context.Context, d *Domain) error
	// DeleteDomain: ENotFound.
	DeleteDomain(ctx context.Context, tenantID, id string) error

	// DueDomains leases up to n domains whose automatic check is due at now: their next
	// check moves to now+lease, so no other caller gets them meanwhile, and a caller
	// that dies leaves them due again when the lease ends.
	DueDomains(ctx context.Context, now time.Time, lease time.Duration, n int) ([]*Domain, error)
	// RecordProof records a check of the domain's claim made with token (see
	// Domain.ApplyProof) and returns the domain as stored. A check made with another
	// token than the claim's (the host name changed meanwhile) records nothing. A status
	// change is published to the edges. ENotFound; EConflict when the proof is there
	// but another tenant's claim of the name is verified (the check is recorded as a
	// miss, unless that claim was verified by a check racing this one).
	RecordProof(ctx context.Context, tenantID, id, token string, p Proof, now time.Time, s DomainSchedule, manual bool) (*Domain, error)
}

// ProofChecker looks for the TXT record that proves a claim of hostname with token.
type ProofChecker interface {
	CheckProof(ctx context.Context, hostname, token string) Proof
}
