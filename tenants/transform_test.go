package tenants_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"tollgate/tenants"
)

func reqHeaders(h tenants.HeaderTransform) *tenants.Transform {
	return &tenants.Transform{Request: &tenants.RequestTransform{Headers: &h}}
}

func reqJSON(j tenants.JSONTransform) *tenants.Transform {
	return &tenants.Transform{Request: &tenants.RequestTransform{JSON: &j}}
}

func prefix(from, to string) *tenants.Transform {
	return &tenants.Transform{Request: &tenants.RequestTransform{Path: &tenants.PathTransform{Prefix: &tenants.PrefixRewrite{From: from, To: to}}}}
}

func TestTransformValidateAccepts(t *testing.T) {
	r := validRoute()
	r.Transform = &tenants.Transform{
		Request: &tenants.RequestTransform{
			Headers: &tenants.HeaderTransform{Add: map[string]string{"X-A": "v"}, Remove: []string{"X-B"}, Rename: map[string]string{"X-Old": "X-New"}},
			JSON: &tenants.JSONTransform{Set: map[string]json.RawMessage{"a.b": json.RawMessage(`{"c":[1,2]}`)},
				Remove: []string{"c"}, Rename: map[string]string{"d": "e.f"}},
			Path: &tenants.PathTransform{Prefix: &tenants.PrefixRewrite{From: "/v1", To: "/v2"}},
		},
		// An upstream may answer with an underscore header; a response edit may name it.
		Response: &tenants.ResponseTransform{Headers: &tenants.HeaderTransform{Add: map[string]string{"Cache-Control": "no-store"}, Remove: []string{"X_Powered_By"}}},
	}
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
}

func TestTransformValidateRejects(t *testing.T) {
	many := map[string]string{}
	for i := range tenants.MaxTransformOps + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	cases := []struct {
		name  string
		tr    *tenants.Transform
		field string
		msg   string
	}{
		{"bad header name", reqHeaders(tenants.HeaderTransform{Add: map[string]string{"X A": "v"}}), `transform.request.headers.add["X A"]`, "not a valid header name"},
		{"empty header name", reqHeaders(tenants.HeaderTransform{Remove: []string{""}}), "transform.request.headers.remove[0]", "empty"},
		{"hop-by-hop", reqHeaders(tenants.HeaderTransform{Remove: []string{"X-Ok", "Connection"}}), "transform.request.headers.remove[1]", "managed by the edge"},
		{"identity add", reqHeaders(tenants.HeaderTransform{Add: map[string]string{"x-consumer-id": "evil"}}), `transform.request.headers.add["x-consumer-id"]`, "managed by the edge"},
		{"identity rename target", reqHeaders(tenants.HeaderTransform{Rename: map[string]string{"X-Who": "X-Consumer-Name"}}), `transform.request.headers.rename["X-Who"]`, "managed by the edge"},
		{"api key rename", reqHeaders(tenants.HeaderTransform{Rename: map[string]string{"X-API-Key": "X-Key"}}), `transform.request.headers.rename["X-API-Key"]`, "managed by the edge"},
		{"self rename", reqHeaders(tenants.HeaderTransform{Rename: map[string]string{"X-A": "x-a"}}), `transform.request.headers.rename["X-A"]`, "to itself"},
		{"value newline", reqHeaders(tenants.HeaderTransform{Add: map[string]string{"X-A": "a\r\nX-B: b"}}), `transform.request.headers.add["X-A"]`, "control character"},
		{"value too long", reqHeaders(tenants.HeaderTransform{Add: map[string]string{"X-A": strings.Repeat("v", 4097)}}), `transform.request.headers.add["X-A"]`, "longer than 4096"},
		{"underscore add", reqHeaders(tenants.HeaderTransform{Add: map[string]string{"X_Consumer_Role": "admin"}}), `transform.request.headers.add["X_Consumer_Role"]`, `has '_' at byte 1: the edge drops request headers whose names contain '_'`},
		{"underscore remove", reqHeaders(tenants.HeaderTransform{Remove: []string{"X-Ok", "x_trace"}}), "transform.request.headers.remove[1]", `use "x-trace"`},
		{"underscore rename source", reqHeaders(tenants.HeaderTransform{Rename: map[string]string{"X_User": "X-User"}}), `transform.request.headers.rename["X_User"]`, "has '_'"},
		{"underscore rename target", reqHeaders(tenants.HeaderTransform{Rename: map[string]string{"X-Who": "X_Consumer_Id"}}), `transform.request.headers.rename["X-Who"]`, "has '_'"},
		{"too many adds", reqHeaders(tenants.HeaderTransform{Add: many}), "transform.request.headers.add", "at most 32"},
		{"response transfer-encoding", &tenants.Transform{Response: &tenants.ResponseTransform{Headers: &tenants.HeaderTransform{Remove: []string{"Transfer-Encoding"}}}}, "transform.response.headers.remove[0]", "managed by the edge"},
		{"json wildcard", reqJSON(tenants.JSONTransform{Remove: []string{"a.*"}}), "transform.request.json.remove[0]", "letters, digits"},
		{"json modifier", reqJSON(tenants.JSONTransform{Set: map[string]json.RawMessage{"@this": json.RawMessage(`1`)}}), `transform.request.json.set["@this"]`, "letters, digits"},
		{"json empty component", reqJSON(tenants.JSONTransform{Remove: []string{"a..b"}}), "transform.request.json.remove[0]", "empty component"},
		{"json deep", reqJSON(tenants.JSONTransform{Remove: []string{strings.Repeat("a.", 16) + "a"}}), "transform.request.json.remove[0]", "more than 16"},
		{"json bad value", reqJSON(tenants.JSONTransform{Set: map[string]json.RawMessage{"a": json.RawMessage(`{nope`)}}), `transform.request.json.set["a"]`, "must be JSON"},
		{"json big value", reqJSON(tenants.JSONTransform{Set: map[string]json.RawMessage{"a": json.RawMessage(`"` + strings.Repeat("x", 8192) + `"`)}}), `transform.request.json.set["a"]`, "longer than 8192"},
		{"json nested rename", reqJSON(tenants.JSONTransform{Rename: map[string]string{"a": "a.b"}}), `transform.request.json.rename["a"]`, "inside the other"},
		{"path without prefix", &tenants.Transform{Request: &tenants.RequestTransform{Path: &tenants.PathTransform{}}}, "transform.request.path.prefix", "required"},
		{"prefix relative", prefix("v1", "/v2"), "transform.request.path.prefix.from", "start with /"},
		{"prefix query", prefix("/v1", "/v2?x"), "transform.request.path.prefix.to", "not allowed"},
		{"prefix dotdot", prefix("/v1", "/a/../b"), "transform.request.path.prefix.to", "normalized"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validRoute()
			r.Transform = tc.tr
			err := r.Validate(strict)
			if tenants.ErrorCode(err) != tenants.EValidation {
				t.Fatalf("want validation error, got %v", err)
			}
			e := err.(*tenants.Error)
			if e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("want field %q with %q, got field %q: %s", tc.field, tc.msg, e.Field, e.Message)
			}
		})
	}
}

func TestCacheValidate(t *testing.T) {
	r := validRoute()
	r.Cache = &tenants.Cache{TTLMS: 5000, Vary: []string{"Accept"}}
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	if r.Cache.MaxEntries != tenants.DefaultCacheEntries || r.Cache.MaxBodyBytes != tenants.DefaultCacheBodyBytes {
		t.Fatalf("defaults not applied: %+v", r.Cache)
	}
	cases := []struct {
		name  string
		c     tenants.Cache
		field string
		msg   string
	}{
		{"no ttl", tenants.Cache{}, "cache.ttl_ms", "between 1"},
		{"long ttl", tenants.Cache{TTLMS: tenants.MaxCacheTTLMS + 1}, "cache.ttl_ms", "between 1"},
		{"entries", tenants.Cache{TTLMS: 1, MaxEntries: -1}, "cache.max_entries", "between 1"},
		{"too many entries", tenants.Cache{TTLMS: 1, MaxEntries: tenants.MaxCacheEntries + 1}, "cache.max_entries", "between 1"},
		{"body", tenants.Cache{TTLMS: 1, MaxBodyBytes: tenants.MaxCacheBodyBytes + 1}, "cache.max_body_bytes", "between 1"},
		{"vary name", tenants.Cache{TTLMS: 1, Vary: []string{"Accept", "Bad Name"}}, "cache.vary[1]", "not a valid header name"},
		{"vary empty", tenants.Cache{TTLMS: 1, Vary: []string{""}}, "cache.vary[0]", "1–128 bytes"},
		{"vary underscore", tenants.Cache{TTLMS: 1, Vary: []string{"Accept_Language"}}, "cache.vary[0]", "has '_'"},
		{"vary many", tenants.Cache{TTLMS: 1, Vary: strings.Split("a,b,c,d,e,f,g,h,i", ",")}, "cache.vary", "at most 8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := validRoute()
			r.Cache = &tc.c
			err := r.Validate(strict)
			if tenants.ErrorCode(err) != tenants.EValidation {
				t.Fatalf("want validation error, got %v", err)
			}
			e := err.(*tenants.Error)
			if e.Field != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("want field %q with %q, got field %q: %s", tc.field, tc.msg, e.Field, e.Message)
			}
		})
	}
}
