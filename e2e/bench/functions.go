package main

// Tenants' functions (proxy-wasm filters) beside S1 and S2:
//
//   - S1f: S1's route running a filter that does nothing (functiontest's watnoop, in WAT):
//     the host's cost of entering and leaving a guest on every request.
//   - S1h: S1's route running a filter that adds a request and a response header
//     (functiontest's watheaders, in WAT).
//
// Both are WAT, so they measure the host, not a guest language: a Go guest carries its
// own runtime into every callback (see docs/functions.md for what that costs).
//   - S2hmac: seed 000's custom authentication written as a filter ("auth": "function"):
//     an HMAC-SHA256 signature of method, path and date checked in the guest, which names
//     the consumer; beside S2's built-in key auth. nginx cannot check the signature: it
//     proxies the route unchecked (S1's work), so compare S2hmac with Tollgate's own S2.
//
// The guests are built from their sources (edge/function/testdata/guests) when the bench
// starts, uploaded with PUT /v1/tenants/{slug}/functions/{name}, and named on the routes.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"tollgate/e2e/bench/harness"
	"tollgate/edge/function/functiontest"
)

const (
	hmacKeyID  = "hmac-client"
	hmacSecret = "bench-s3cret"
)

// functionScenarios are the scenario ids of this file.
var functionScenarios = []string{"S1f", "S1h", "S2hmac"}

func functionPerfScenario(id string) *perfScenario {
	switch id {
	case "S1f":
		return &perfScenario{id: id, desc: "S1 + a proxy-wasm filter that does nothing (WAT)",
			host: "bench.localhost", hit: "/s1f", paths: []string{"/s1f"}}
	case "S1h":
		return &perfScenario{id: id, desc: "S1 + a proxy-wasm filter that adds a request and a response header (WAT)",
			host: "bench.localhost", hit: "/s1h", paths: []string{"/s1h"}}
	default:
		sc := &perfScenario{id: id, desc: "HMAC signature auth as a filter naming the consumer; nginx: plain proxy",
			host: "bench.localhost", hit: "/hmac", paths: []string{"/hmac"}}
		sc.sign = func() map[string]string { return hmacHeaders("GET", sc.hit) }
		sc.headers = sc.sign()
		return sc
	}
}

// hmacHeaders signs a request as the HMAC guest checks it; the date must be within five
// minutes, so each measurement signs anew.
func hmacHeaders(method, path string) map[string]string {
	date := time.Now().UTC().Format(http.TimeFormat)
	mac := hmac.New(sha256.New, []byte(hmacSecret))
	mac.Write([]byte(method + path + date))
	return map[string]string{"X-Key-Id": hmacKeyID, "X-Date": date, "X-Signature": hex.EncodeToString(mac.Sum(nil))}
}

// configureFunctionScenario uploads the scenario's guest and creates its route (and, for
// S2hmac, the consumer the guest names).
func (b *bench) configureFunctionScenario(ctx context.Context, s *harness.Stack, slug, upURL string, sc *perfScenario) error {
	guest, config, auth := map[string]string{"S1f": functiontest.WatNoop, "S1h": functiontest.WatHeaders, "S2hmac": functiontest.HMAC}[sc.id], "", "none"
	if sc.id == "S2hmac" {
		config, auth = hmacKeyID+"="+hmacSecret, "function"
		if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": hmacKeyID}, nil); err != nil {
			return err
		}
	}
	module, err := buildGuest(guest)
	if err != nil {
		return fmt.Errorf("%s: building the %s guest: %w", sc.id, guest, err)
	}
	if err := s.Client.PutBytes(ctx, "/v1/tenants/"+slug+"/functions/"+guest, "application/wasm", module); err != nil {
		return err
	}
	r := harness.RouteBody(sc.id, sc.hit, upURL, auth, false)
	r["functions"] = []map[string]any{{"name": guest, "config": config}}
	return s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil)
}

// buildGuest compiles a guest as functiontest's Build does, for a program rather than a
// test: a WAT file of functiontest's guests with Debian's wat2wasm (package wabt), else
// one of functiontest's Go guests.
func buildGuest(name string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "bench-guest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, name+".wasm")
	var cmd *exec.Cmd
	if src := filepath.Join(functiontest.Dir(), name+".wat"); fileExists(src) {
		cmd = exec.Command("wat2wasm", src, "-o", out)
	}
	if cmd == nil {
		cmd = exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./"+name)
		cmd.Dir = functiontest.Dir()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, b)
	}
	return os.ReadFile(out)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
