package api_test

import (
	"strings"
	"testing"
	"time"
)

// TestKeyLabelAndExpiry: a key takes an optional label and expiry, answers and lists
// them (last_used_at stays absent until an edge reports a use); bad values are the
// validation envelope on their field and create nothing.
func TestKeyLabelAndExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	keys := "/v1/tenants/acme/consumers/" + e.consumer("acme", "app") + "/keys"

	exp := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	k := e.do("POST", keys, adminToken, map[string]any{"label": "ci runner", "expires_at": exp.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)}).want(201)
	if k.str("label") != "ci runner" || k.str("expires_at") != exp.UTC().Format(time.RFC3339) || k.str("key") == "" {
		t.Fatalf("created key: %s", k.body)
	}
	if _, ok := k.json["last_used_at"]; ok {
		t.Fatalf("a new key has a last use: %s", k.body)
	}
	e.do("POST", keys, adminToken, nil).want(201) // no body: no label, no expiry

	for _, c := range []struct {
		body        string
		code, field string
	}{
		{`{"expires_at":"tomorrow"}`, "validation_failed", "expires_at"},
		{`{"expires_at":"2020-01-01T00:00:00Z"}`, "validation_failed", "expires_at"},
		{`{"expires_at":1900000000}`, "invalid_request", "expires_at"},
		{`{"label":"` + strings.Repeat("x", 101) + `"}`, "validation_failed", "label"},
		{`{"label":"a\u0007b"}`, "validation_failed", "label"},
		{`{"last_used_at":"2030-01-01T00:00:00Z"}`, "invalid_request", "last_used_at"},
	} {
		e.do("POST", keys, adminToken, c.body).wantErr(400, c.code, c.field)
	}

	items := e.do("GET", keys, adminToken, nil).want(200).items()
	if len(items) != 2 {
		t.Fatalf("%d keys, want 2 (the refused ones created nothing)", len(items))
	}
	var labelled map[string]any
	for _, it := range items {
		if m := it.(map[string]any); m["id"] == k.str("id") {
			labelled = m
		}
	}
	if labelled["label"] != "ci runner" || labelled["expires_at"] != exp.UTC().Format(time.RFC3339) {
		t.Fatalf("listed key: %v", labelled)
	}
	if _, ok := labelled["last_used_at"]; ok {
		t.Fatalf("an unused key lists a last use: %v", labelled)
	}
}
