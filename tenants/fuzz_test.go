package tenants_test

import (
	"encoding/json"
	"strings"
	"testing"

	"tollgate/tenants"
)

// The validators see every byte a tenant sends; they must never panic, and what they
// accept must validate again unchanged (normalization is idempotent).
func FuzzRouteValidate(f *testing.F) {
	f.Add([]byte(`{"name":"a","paths":["/a","=/b"],"methods":["get"],"upstream":{"targets":[{"url":"http://127.0.0.1:1/x","weight":2}]}}`))
	f.Add([]byte(`{"name":"a","paths":["/%2e%2e"],"upstream":{"targets":[{"url":"http://[::ffff:169.254.169.254]"}]}}`))
	f.Add([]byte(`{"name":"a","paths":["/a"],"auth":"jwt","upstream":{"targets":[{"url":"http://127.0.0.1:1"}],"balance":"hash","hash_on":"header:X-User","health_check":{"path":"/healthz","interval_ms":100},"passive_health":{},"circuit_breaker":{"error_percent":50},"retries":{"attempts":2}},"canary":{"weight":5,"sticky":true,"match":{"claim":"tier","values":["beta"]},"upstream":{"targets":[{"url":"http://127.0.0.1:2"}],"balance":"least_conn"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r tenants.Route
		if json.Unmarshal(data, &r) != nil {
			return
		}
		if r.Validate(devAddressRule) != nil {
			return
		}
		before, _ := json.Marshal(r)
		if err := r.Validate(devAddressRule); err != nil {
			t.Fatalf("accepted route fails revalidation: %v", err)
		}
		after, _ := json.Marshal(r)
		if string(before) != string(after) {
			t.Fatalf("normalization not idempotent:\n%s\n%s", before, after)
		}
	})
}

func FuzzSlugAndPath(f *testing.F) {
	for _, s := range []string{"acme", "-x", "/a/b", "=/a", "/a/../b", "/%41", "/users/{id}", "=/{a}/{b}/", "/a{b}", "/{}", "/{a}}", "/{a}/{a}",
		"http://[64:ff9b::a00:1]/", "http://[2002:7f00:1::1]:8080", "http://[fe80::1%25eth0]/", "http://198.18.0.1", "https://[::ffff:0:7f00:1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if tenants.ValidateSlug(s) == nil && (len(s) == 0 || len(s) > 63) {
			t.Fatalf("slug %q accepted", s)
		}
		if tenants.ValidatePath(s) == nil && strings.ContainsAny(s, "{}") {
			// Braces only as whole "{name}" segments: the pattern has no other.
			for _, seg := range strings.Split(tenants.PathPattern(s), "/") {
				if strings.ContainsAny(seg, "{}") && seg != "{}" {
					t.Fatalf("path %q accepted with segment %q", s, seg)
				}
			}
		}
		_ = tenants.ValidateName(s)
		_, _ = (&tenants.UpstreamAddressRule{}).ValidateTarget(s)
	})
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add("t.route.r", []byte(`{"rev":1,"route":{"id":"r","tenant_id":"t"}}`))
	f.Add("t.tenant", []byte(`{"rev":1,"tenant":{"id":"t"}}`))
	f.Add("t.jwt-issuer.i", []byte(`{"rev":1,"jwt_issuer":{"id":"i","tenant_id":"t","issuer":"x"}}`))
	f.Add("t.policy", []byte(`{"rev":1,"policy":{"tenant_id":"t","rules":[["a","/x","GET"]]}}`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		pk, e, err := tenants.DecodeEntry(key, value)
		if err != nil {
			return
		}
		k, err := e.EntryKey()
		if err != nil || k != key || pk.TenantID == "" {
			t.Fatalf("decoded %q into an entry for %q (%v)", key, k, err)
		}
	})
}

// FuzzParseAuditRange: any query bounds are read without panicking; a range it accepts is
// never empty, and a day given alone is a whole UTC day.
func FuzzParseAuditRange(f *testing.F) {
	f.Add("2026-11-01", "2026-11-30")
	f.Add("2026-11-01T10:00:00Z", "")
	f.Add("", "2026-13-45")
	f.Add("9999-12-31", "0001-01-01")
	f.Fuzz(func(t *testing.T, from, to string) {
		f, tt, err := tenants.ParseAuditRange(from, to)
		if err != nil {
			if tenants.ErrorCode(err) != tenants.EValidation {
				t.Fatalf("%q %q: %v is not a validation error", from, to, err)
			}
			return
		}
		if !f.IsZero() && !tt.IsZero() && !tt.After(f) {
			t.Fatalf("%q %q: empty range %v – %v accepted", from, to, f, tt)
		}
		if from == "" && !f.IsZero() || to == "" && !tt.IsZero() {
			t.Fatalf("%q %q: an empty bound is not open", from, to)
		}
	})
}
