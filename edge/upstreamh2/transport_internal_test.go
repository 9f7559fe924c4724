package upstreamh2

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// The :path the transport sends (URL.RequestURI) is the target as the edge passes it on,
// whichever way targetURL took; a target the parse refuses is refused.
func TestTargetURL(t *testing.T) {
	h := &Transport{addr: "10.0.0.1:50051"}
	for _, tc := range []struct{ target, want string }{
		{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Check"},
		{"/items/42?color=red&size=9", "/items/42?color=red&size=9"},
		{"/items?", "/items?"},
		{"/a%2Fb/c%20d", "/a%2Fb/c%20d"},
		{"/", "/"},
		{"//double/slash", "//double/slash"},
		{"/bad%zz", ""},
		{"/frag#x", "/frag%23x"},
		{"/utf8/\xc3\xa9", "/utf8/%C3%A9"},
	} {
		u, err := h.targetURL([]byte(tc.target))
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q: %v, want an error", tc.target, u)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.target, err)
			continue
		}
		if got := u.RequestURI(); got != tc.want {
			t.Errorf("%q: :path %q, want %q", tc.target, got, tc.want)
		}
		if u.Scheme != "http" || u.Host != h.addr {
			t.Errorf("%q: %s://%s", tc.target, u.Scheme, u.Host)
		}
	}
}

// Field names keep their canonical form, the cache stops growing at maxHeaderKeys, and
// names past it are still right.
func TestHeaderKey(t *testing.T) {
	for _, k := range []string{"X-Forwarded-For", "Content-Type", "grpc-timeout", "X-Odd_Name"} {
		if got, want := headerKey([]byte(k)), http.CanonicalHeaderKey(k); got != want {
			t.Errorf("%q: %q, want %q", k, got, want)
		}
	}
	for i := range 2 * maxHeaderKeys {
		k := "X-Client-Chosen-" + strconv.Itoa(i)
		if got := headerKey([]byte(k)); got != k {
			t.Fatalf("%q: %q", k, got)
		}
	}
	if n := len(headerKeys.names()); n > maxHeaderKeys {
		t.Errorf("%d names cached, at most %d", n, maxHeaderKeys)
	}
}

func BenchmarkNewRequest(b *testing.B) {
	h := &Transport{addr: "127.0.0.1:50051"}
	var rh fasthttp.RequestHeader
	rh.SetMethod("POST")
	rh.SetRequestURI("/grpc.health.v1.Health/Check")
	rh.SetContentType("application/grpc")
	for _, kv := range [][2]string{{"Te", "trailers"}, {"User-Agent", "grpc-go/1.70.0"}, {"Grpc-Timeout", "5S"},
		{"X-Forwarded-For", "192.0.2.7"}, {"X-Forwarded-Proto", "http"}, {"X-Forwarded-Host", "grpc.localhost"}, {"X-Request-Id", "0a1b2c3d"}} {
		rh.Set(kv[0], kv[1])
	}
	target, host := []byte("/grpc.health.v1.Health/Check"), []byte("grpc.localhost")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.NewRequest(ctx, &rh, target, host, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// The upstream request carries every end-to-end field with its values in order,
// repeated ones included, none of the connection-specific ones, and TE: trailers.
func TestNewRequestFields(t *testing.T) {
	h := &Transport{addr: "127.0.0.1:50051"}
	var rh fasthttp.RequestHeader
	rh.SetMethod("POST")
	rh.SetRequestURI("/svc/Method")
	rh.SetContentType("application/grpc")
	rh.Add("X-Tag", "one")
	rh.Add("Connection", "keep-alive")
	rh.Add("X-Tag", "")
	rh.Add("X-Tag", "three")
	rh.Add("Grpc-Timeout", "5S")
	rh.Add("Keep-Alive", "timeout=5")
	r, err := h.NewRequest(context.Background(), &rh, []byte("/svc/Method?x=1"), []byte("api.example"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Content-Type": {"application/grpc"},
		"X-Tag":        {"one", "", "three"},
		"Grpc-Timeout": {"5S"},
		"Te":           {"trailers"},
	}
	if len(r.Header) != len(want) {
		t.Errorf("fields %v, want %v", r.Header, want)
	}
	for k, vs := range want {
		if got := r.Header[k]; !slices.Equal(got, vs) {
			t.Errorf("%s: %q, want %q", k, got, vs)
		}
	}
	if r.Method != "POST" || r.Host != "api.example" || r.URL.RequestURI() != "/svc/Method?x=1" {
		t.Errorf("%s %s %s", r.Method, r.Host, r.URL.RequestURI())
	}
	// A value appended later must not write over a neighbour's.
	r.Header["Grpc-Timeout"] = append(r.Header["Grpc-Timeout"], "1S")
	if got := r.Header["Te"]; !slices.Equal(got, []string{"trailers"}) {
		t.Errorf("Te after an append to another field: %q", got)
	}
}
