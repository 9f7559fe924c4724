package rbac_test

import (
	"testing"

	"tollgate/tenants/rbac"
)

// TestMatrix pins every role × class decision, in a tenant and on the platform.
func TestMatrix(t *testing.T) {
	p, err := rbac.New()
	if err != nil {
		t.Fatal(err)
	}
	const tenant = "0190a8f0-0000-7000-8000-000000000001"
	R, W, K, A, B := rbac.Read, rbac.Write, rbac.Keys, rbac.TenantAdmin, rbac.BillingExport
	allowed := map[string][]rbac.Class{
		"owner":     {R, W, K, A},
		"admin":     {R, W, K, A},
		"developer": {R, W},
		"viewer":    {R},
		"operator":  {R, W, K, A},
		"finance":   {R},
		"":          nil,
		"root":      nil,
	}
	for role, classes := range allowed {
		for _, c := range rbac.Classes {
			want := false
			for _, a := range classes {
				want = want || a == c
			}
			if got := p.Allow(role, tenant, c); got != want {
				t.Errorf("Allow(%q, tenant, %s) = %v, want %v", role, c, got, want)
			}
		}
	}
	for role, want := range map[string]bool{"finance": true, "operator": false, "owner": false, "admin": false, "viewer": false} {
		if got := p.Allow(role, rbac.PlatformDomain, B); got != want {
			t.Errorf("Allow(%q, platform, billing_export) = %v, want %v", role, got, want)
		}
	}
	for role, want := range map[string]bool{"finance": true, "operator": true, "owner": false, "admin": false, "viewer": false} {
		if got := p.Allow(role, rbac.PlatformDomain, rbac.BillingPrices); got != want {
			t.Errorf("Allow(%q, platform, billing_prices) = %v, want %v", role, got, want)
		}
	}
	// Unclassified means tenant_admin.
	if p.Allow("developer", tenant, "") || !p.Allow("admin", tenant, "") {
		t.Error("an unclassified action must need owner or admin")
	}
	if p.Allow("viewer", "", R) {
		t.Error("no domain, no permission")
	}
}
