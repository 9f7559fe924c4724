// Package rbac is Tollgate's one management-plane policy: which role may do which class
// of thing in which tenant. It wraps a Casbin enforcer (RBAC with domains, domain = tenant)
// over the model and policy embedded beside it, so the api middleware and the console
// ask the same question and get the same answer.
//
// Who holds which role is not decided here: memberships, tokens and platform roles are
// stored data, read by the caller for each request (so a revoked membership takes effect
// at once, on every replica). It does no I/O.
package rbac

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/casbin/casbin/v2"
	"github.com/casbin/casbin/v2/model"
	"github.com/casbin/casbin/v2/util"
)

// Class is what an endpoint or a console action does, as the policy sees it.
type Class string

// The classes. An endpoint that names none is treated as TenantAdmin: new endpoints are
// closed to everyone but owners and admins until someone classifies them.
const (
	Read          Class = "read"
	Write         Class = "write"
	Keys          Class = "keys"
	TenantAdmin   Class = "tenant_admin"
	BillingExport Class = "billing_export"
	// BillingPrices is managing the platform plans' prices (domain "platform").
	BillingPrices Class = "billing_prices"
)

// Classes lists every class, for tests and documentation.
var Classes = []Class{Read, Write, Keys, TenantAdmin, BillingExport, BillingPrices}

// PlatformDomain is the domain of actions that span tenants.
const PlatformDomain = "platform"

//go:embed model.conf
var modelText string

//go:embed policy.csv
var policyText string

// Roles are the management roles and what each may do. It is safe for concurrent use and never changes after New.
type Roles struct {
	e *casbin.SyncedEnforcer
}

// New compiles the embedded model and policy.
func New() (*Roles, error) {
	m, err := model.NewModelFromString(modelText)
	if err != nil {
		return nil, fmt.Errorf("rbac: model: %w", err)
	}
	e, err := casbin.NewSyncedEnforcer(m)
	if err != nil {
		return nil, fmt.Errorf("rbac: %w", err)
	}
	e.AddNamedDomainMatchingFunc("g", "keyMatch", util.KeyMatch)
	for n, line := range strings.Split(policyText, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		var perr error
		switch {
		case f[0] == "p" && len(f) == 4:
			_, perr = e.AddPolicy(f[1], f[2], f[3])
		case f[0] == "g" && len(f) == 4:
			_, perr = e.AddGroupingPolicy(f[1], f[2], f[3])
		default:
			perr = fmt.Errorf("not a p or g rule of 3 fields")
		}
		if perr != nil {
			return nil, fmt.Errorf("rbac: policy.csv line %d: %w", n+1, perr)
		}
	}
	return &Roles{e: e}, nil
}

// Must is New for program start-up: the embedded files are part of the build.
func Must() *Roles {
	p, err := New()
	if err != nil {
		panic(err)
	}
	return p
}

// Allow reports whether role may do class in domain (a tenant id, or PlatformDomain).
// An empty role may do nothing.
func (p *Roles) Allow(role, domain string, c Class) bool {
	if role == "" || domain == "" {
		return false
	}
	if c == "" {
		c = TenantAdmin
	}
	ok, err := p.e.Enforce(role, domain, string(c))
	return err == nil && ok
}
