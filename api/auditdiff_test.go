package api_test

import (
	"strings"
	"testing"

	"tollgate/api"
	"tollgate/tenants"
)

// TestAuditListsWhatChanged: the audit listing carries what each update changed: a plan's
// fields before and after, a config apply's and an import's objects by name (an updated
// one with its fields), and no secret.
func TestAuditListsWhatChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Audit = c.Tenants.(tenants.AuditService) })
	e.tenant("acme")
	id := e.plan("acme", "gold")
	e.do("PUT", "/v1/tenants/acme/plans/"+id, adminToken, map[string]any{"name": "gold", "rate_limit": map[string]any{"rps": 25}}, "If-Match", "*").want(200)
	newest := func() map[string]any {
		t.Helper()
		return e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items()[0].(map[string]any)
	}
	a := newest()
	if got, want := jsonOf2(a["changes"]), `{"fields":{"rate_limit.burst":{"after":25,"before":10},"rate_limit.rps":{"after":25,"before":10}}}`; a["action"] != "plans.update" || got != want {
		t.Fatalf("plans.update %v\n got %s\nwant %s", a["action"], got, want)
	}

	const secret = "0123456789abcdef0123456789abcdef-listed"
	is := e.do("POST", "/v1/tenants/acme/jwt-issuers", adminToken, map[string]any{"issuer": "https://idp.example", "audiences": []string{"api"}, "hs256_secret": secret}).want(201)
	e.do("PUT", "/v1/tenants/acme/jwt-issuers/"+is.str("id"), adminToken, map[string]any{"issuer": "https://idp.example", "audiences": []string{"api"}, "hs256_secret": strings.ToUpper(secret)}, "If-Match", "*").want(200)
	if a := newest(); jsonOf2(a["changes"]) != `{"fields":{"hs256_secret":{"redacted":true}}}` {
		t.Fatalf("jwt_issuers.update changes %s", jsonOf2(a["changes"]))
	}

	doc := e.do("GET", "/v1/tenants/acme/config", adminToken, nil).want(200).json
	doc["plans"].([]any)[0].(map[string]any)["concurrency"] = 4
	e.do("PUT", "/v1/tenants/acme/config", adminToken, doc).want(200)
	if a := newest(); a["action"] != "config.apply" || jsonOf2(a["changes"]) != `{"updated":[{"fields":{"concurrency":{"after":4,"before":0}},"kind":"plan","name":"gold"}]}` {
		t.Fatalf("config.apply %v: %s", a["action"], jsonOf2(a["changes"]))
	}

	e.do("POST", "/v1/tenants/acme/routes:import", adminToken, importBody(petsDoc(""))).want(200)
	a = newest()
	if got := jsonOf2(a["changes"]); a["action"] != "routes.import" || !strings.Contains(got, `"created":[{"kind":"route","name":"openapi:pets:/health"}`) {
		t.Fatalf("routes.import %v: %s", a["action"], got)
	}
	body := e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).body
	if strings.Contains(strings.ToLower(string(body)), "0123456789") {
		t.Fatalf("a secret is in the audit log: %s", body)
	}
}

// TestPlanAbovePlatformPlanWarns: a consumer plan above the tenant's platform plan (pro:
// 200 rps, burst 400, 1M requests a month, 100 concurrent) is saved, and the answer says
// where it exceeds it; one within it carries no warning.
func TestPlanAbovePlatformPlanWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	big := map[string]any{"name": "huge", "rate_limit": map[string]any{"rps": 500, "burst": 1000}, "quota": map[string]any{"requests": 2000000}, "concurrency": 200}
	r := e.do("POST", "/v1/tenants/acme/plans", adminToken, big).want(201)
	var fields []string
	for _, w := range r.json["warnings"].([]any) {
		w := w.(map[string]any)
		fields = append(fields, w["field"].(string))
		if !strings.Contains(w["message"].(string), `platform plan "pro"`) {
			t.Errorf("warning %v", w)
		}
	}
	if strings.Join(fields, " ") != "rate_limit.rps rate_limit.burst quota.requests concurrency" {
		t.Fatalf("warnings on %v: %s", fields, r.body)
	}
	if got := e.do("GET", "/v1/tenants/acme/plans/"+r.str("id"), adminToken, nil).want(200); strings.Contains(string(got.body), "warnings") {
		t.Fatalf("a stored plan carries warnings: %s", got.body)
	}
	r = e.do("PUT", "/v1/tenants/acme/plans/"+r.str("id"), adminToken, map[string]any{"name": "huge", "rate_limit": map[string]any{"rpm": 600, "burst": 50}}, "If-Match", "*").want(200)
	if _, ok := r.json["warnings"]; ok {
		t.Fatalf("a plan within the platform plan warns: %s", r.body)
	}
	r = e.do("PUT", "/v1/tenants/acme/plans/"+r.str("id"), adminToken, map[string]any{"name": "huge", "rate_limit": map[string]any{"rpm": 60000, "burst": 50}}, "If-Match", "*").want(200)
	if jsonOf2(r.json["warnings"]) == "" || !strings.Contains(string(r.body), `"field":"rate_limit.rpm"`) || !strings.Contains(string(r.body), "60000 requests/min is above the 200 requests/s") {
		t.Fatalf("rpm above the platform's rps: %s", r.body)
	}
}

// TestPlatformRoleMail: a platform role granted to an address mails it how to sign in, or
// to create an account of no tenant; withdrawing the role mails nothing.
func TestPlatformRoleMail(t *testing.T) {
	t.Parallel()
	e, mail := peopleEnv(t)
	e.do("PUT", "/v1/platform/roles", adminToken, map[string]any{"email": "fin@example.com", "role": "finance"}).want(200)
	m := mail.WaitFor(t, "fin@example.com")
	if !strings.Contains(m.Text, "https://console.tollgate.test/console/signup?no_tenant=1&email=fin%40example.com") || !strings.Contains(m.Subject, "finance") {
		t.Fatalf("mail: %s\n%s", m.Subject, m.Text)
	}
	e.do("PUT", "/v1/platform/roles", adminToken, map[string]any{"email": "fin@example.com", "role": ""}).want(200)
	if n := len(mail.To("fin@example.com")); n != 1 {
		t.Fatalf("%d mails after the role was withdrawn", n)
	}
}
