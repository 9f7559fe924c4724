package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer is an identity provider's key set endpoint over TLS: it serves whatever set
// the test last gave it, with Cache-Control: max-age, and counts the fetches.
type jwksServer struct {
	srv     *httptest.Server
	set     atomic.Pointer[[]byte]
	fetches atomic.Int64
	caFile  string // its certificate as PEM, for the edge's SSL_CERT_FILE
}

func newJWKSServer(t *testing.T, maxAge time.Duration) *jwksServer {
	t.Helper()
	j := &jwksServer{}
	j.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", fmt.Sprintf("max-age=%d", int(maxAge.Seconds())))
		_, _ = w.Write(*j.set.Load())
	}))
	t.Cleanup(j.srv.Close)
	j.caFile = filepath.Join(t.TempDir(), "jwks-ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: j.srv.Certificate().Raw})
	if err := os.WriteFile(j.caFile, block, 0o600); err != nil {
		t.Fatal(err)
	}
	return j
}

// serve makes the endpoint answer with these keys from now on.
func (j *jwksServer) serve(t *testing.T, keys map[string]*rsa.PrivateKey) {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	set := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	for kid, k := range keys {
		set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	j.set.Store(&b)
}

// TestJWKSRotation rotates an issuer's signing key at its jwks_url (https, the production
// fetch path: the edge trusts the test provider's certificate through SSL_CERT_FILE, as it
// would a private CA) with real api and edge processes, and holds the edge to the README's
// JWKS caching:
//   - a token signed by a newly published key (a kid the edge's set lacks) is accepted
//     within the 10 s by which an unknown kid may trigger a refetch, plus a margin;
//   - once the provider withdraws the old key, the old key's tokens are refused within
//     the set's refresh (the provider's max-age, 60 s, the least the edge honours), plus a
//     margin, and not before the edge has fetched the set without it; a token verified
//     before is not kept alive by the edge's cache of verified tokens;
//   - the new key's tokens are served throughout.
//
// The margins (3 s) are for a busy shared machine; the behaviour (which fetch changed the
// answer) is asserted exactly.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	const (
		iss, aud    = "https://login.rotate.example", "rotate-api"
		maxAge      = time.Minute      // the provider's Cache-Control; the edge's MinRefresh
		minInterval = 10 * time.Second // the least time between two fetches of one set
		margin      = 3 * time.Second
	)
	idp := newJWKSServer(t, maxAge)
	oldKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	idp.serve(t, map[string]*rsa.PrivateKey{"old": oldKey})

	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge("SSL_CERT_FILE=" + idp.caFile)
	t.Cleanup(edge.close)
	up := echoUpstream(t, "rotate-up")
	api.createTenant("rot")
	api.must(201, "POST", "/v1/tenants/rot/jwt-issuers", map[string]any{
		"issuer": iss, "audiences": []string{aud}, "jwks_url": idp.srv.URL + "/.well-known/jwks.json",
	})
	api.createRoute("rot", routeSpec("api", "/api", up.URL, "jwt"))

	token := func(k *rsa.PrivateKey, kid, sub string) []string {
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"iss": iss, "aud": aud, "sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		sig, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"Authorization", "Bearer " + sig}
	}
	oldTok := token(oldKey, "old", "alice")
	eventually(t, 30*time.Second, "the old key's token is served", served(edge, "rot", "/api", "rotate-up", oldTok...))

	// Rotation, step 1: the provider publishes the new key beside the old one.
	idp.serve(t, map[string]*rsa.PrivateKey{"old": oldKey, "new": newKey})
	newTok := token(newKey, "new", "bob")
	took := eventually(t, minInterval+margin, "the new key's token is served after it was published",
		served(edge, "rot", "/api", "rotate-up", newTok...))
	t.Logf("a token of the newly published key was served %s after the key was published", took.Round(time.Millisecond))
	if err := served(edge, "rot", "/api", "rotate-up", oldTok...)(); err != nil {
		t.Fatalf("the old key's token, both keys published: %v", err)
	}

	// Rotation, step 2: the provider withdraws the old key. Its tokens work until the
	// edge's next fetch, which the set's max-age schedules; from then on they are refused,
	// the one verified before as much as a fresh one.
	fetchesBefore := idp.fetches.Load()
	idp.serve(t, map[string]*rsa.PrivateKey{"new": newKey})
	withdrawn := time.Now()
	freshOld := token(oldKey, "old", "carol")
	var refusedAfter time.Duration
	eventually(t, maxAge+margin, "the withdrawn key's tokens are refused", func() error {
		r, err := edge.do("GET", "rot", "/api", oldTok...)
		if err != nil {
			return err
		}
		// Read after the answer: a refusal must follow a fetch of the new set.
		fetched := idp.fetches.Load() > fetchesBefore
		if r.Status == 200 {
			return fmt.Errorf("the old key's token is still served (%s since the withdrawal, set fetched since: %v)", time.Since(withdrawn).Round(time.Millisecond), fetched)
		}
		if !fetched {
			t.Fatalf("the old key's token was refused before the edge fetched the set without it: %s", r)
		}
		if err := checkEnvelope(r, 401, "invalid_credential"); err != nil {
			t.Fatalf("the old key's token after its withdrawal: %v", err)
		}
		refusedAfter = time.Since(withdrawn)
		return nil
	})
	t.Logf("the withdrawn key's tokens were refused %s after the withdrawal (max-age %s)", refusedAfter.Round(time.Millisecond), maxAge)
	wantEnvelope(t, edge.get(t, "rot", "/api", freshOld...), 401, "invalid_credential")
	if err := served(edge, "rot", "/api", "rotate-up", newTok...)(); err != nil {
		t.Fatalf("the new key's token after the old one was withdrawn: %v", err)
	}
}
