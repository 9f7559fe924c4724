package jwtauth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

// Keys are generated once per test binary: RSA generation is slow.
var (
	rsaKeys = sync.OnceValue(func() []*rsa.PrivateKey {
		out := make([]*rsa.PrivateKey, 4)
		for i := range out {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			out[i] = k
		}
		return out
	})
	p256Key   = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
	p256Other = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
	p384Key   = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P384()) })
	edKey     = sync.OnceValue(func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	})
)

func mustEC(c elliptic.Curve) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func rsaKey(i int) *rsa.PrivateKey { return rsaKeys()[i] }

const (
	issA     = "https://idp.tenant-a.example/"
	issB     = "https://idp.tenant-b.example/"
	audA     = "api://tenant-a"
	audB     = "api://tenant-b"
	hsSecret = "0123456789abcdef0123456789abcdef-hs256-secret"
)

var b64 = base64.RawURLEncoding

// rsaJWK is the public JWK of k.
func rsaJWK(k *rsa.PrivateKey, kid, alg string) jwtauth.JWK {
	return jwtauth.JWK{Kty: "RSA", Kid: kid, Alg: alg, Use: "sig",
		N: b64.EncodeToString(k.N.Bytes()), E: b64.EncodeToString(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(k *ecdsa.PrivateKey, kid string) jwtauth.JWK {
	size := (k.Curve.Params().BitSize + 7) / 8
	pt, err := k.PublicKey.Bytes()
	if err != nil {
		panic(err)
	}
	return jwtauth.JWK{Kty: "EC", Kid: kid, Crv: k.Curve.Params().Name,
		X: b64.EncodeToString(pt[1 : 1+size]), Y: b64.EncodeToString(pt[1+size:])}
}

func edJWK(k ed25519.PrivateKey, kid string) jwtauth.JWK {
	return jwtauth.JWK{Kty: "OKP", Kid: kid, Crv: "Ed25519", Alg: "EdDSA", X: b64.EncodeToString(k.Public().(ed25519.PublicKey))}
}

// claims returns valid claims for issuer iss and audience aud at now.
func claims(iss, aud string, now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": iss, "aud": aud, "sub": "alice",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"roles": []string{"reader", "writer"},
	}
}

// sign signs c with method and key, setting kid when not empty and any extra headers.
func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims, hdr map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

// forge builds a token from raw header and claims JSON and a signature over them made
// by sig (nil: empty signature). It is how hostile tokens no library would sign are made.
func forge(header, payload any, sig func(signingInput []byte) []byte) string {
	h, _ := json.Marshal(header)
	p, _ := json.Marshal(payload)
	in := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	s := ""
	if sig != nil {
		s = b64.EncodeToString(sig([]byte(in)))
	}
	return in + "." + s
}

// ecSign signs with an EC key using hash h, encoding r||s in size-byte halves, whatever
// the key's curve: it can make an "ES384" signature with a P-256 key.
func ecSign(k *ecdsa.PrivateKey, h crypto.Hash, size int) func([]byte) []byte {
	return func(in []byte) []byte {
		var d []byte
		switch h {
		case crypto.SHA384:
			s := sha512.Sum384(in)
			d = s[:]
		default:
			s := sha256.Sum256(in)
			d = s[:]
		}
		r, s, err := ecdsa.Sign(rand.Reader, k, d)
		if err != nil {
			panic(err)
		}
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		s.FillBytes(out[size:])
		return out
	}
}

// clock is a settable time source for the JWKS cache and Verify.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().Truncate(time.Second).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// idp is an identity provider's JWKS endpoint on httptest, whose answer tests change.
type idp struct {
	srv  *httptest.Server
	hits atomic.Int64

	mu           sync.Mutex
	status       int
	body         []byte
	cacheControl string
	delay        time.Duration
	gate         chan struct{} // when set, requests wait for it to close before answering
}

func newIDP(t testing.TB, keys ...jwtauth.JWK) *idp {
	p := &idp{status: 200}
	p.setKeys(keys...)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		p.mu.Lock()
		status, body, cc, delay, gate := p.status, p.body, p.cacheControl, p.delay, p.gate
		p.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) url() string { return p.srv.URL + "/.well-known/jwks.json" }

func (p *idp) setKeys(keys ...jwtauth.JWK) {
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		panic(err)
	}
	p.set(200, b)
}

func (p *idp) set(status int, body []byte) {
	p.mu.Lock()
	p.status, p.body = status, body
	p.mu.Unlock()
}

// hold makes requests wait (counted as hits) until release is called; the test's end
// releases them too, so a failing test does not leave the server's Close waiting.
func (p *idp) hold(t testing.TB) (release func()) {
	gate := make(chan struct{})
	p.mu.Lock()
	p.gate = gate
	p.mu.Unlock()
	release = sync.OnceFunc(func() {
		p.mu.Lock()
		p.gate = nil
		p.mu.Unlock()
		close(gate)
	})
	t.Cleanup(release)
	return release
}

func (p *idp) setCacheControl(v string) {
	p.mu.Lock()
	p.cacheControl = v
	p.mu.Unlock()
}

// attacker is a server that must never be contacted.
func attacker(t testing.TB) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"keys":[]}`))
	}))
	t.Cleanup(s.Close)
	return s, &hits
}

// newCache is a cache on clock c for httptest providers. The fetch timeout is generous:
// on a loaded CI machine a loopback fetch can take seconds, and one that times out is a
// failed fetch, retried only after MinInterval on c, which a test never reaches by
// waiting.
func newCache(c *clock) *jwtauth.JWKSCache {
	return jwtauth.NewJWKSCache(jwtauth.JWKSConfig{AllowHTTPLoopback: true, Now: c.Now, Timeout: 15 * time.Second})
}

func mustVerifier(t testing.TB, tenant string, opts jwtauth.Options, issuers ...jwtauth.Issuer) *jwtauth.Verifier {
	t.Helper()
	v, err := jwtauth.NewVerifier(tenant, issuers, opts)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// waitFor polls fn until it is true or the deadline passes.
func waitFor(t testing.TB, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // generous: CI shares two cores among many packages
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pretty(tok string) string {
	parts := strings.Split(tok, ".")
	var out []string
	for i, p := range parts {
		if i == 2 {
			out = append(out, "<sig "+itoa(len(p))+">")
			continue
		}
		b, err := b64.DecodeString(p)
		if err != nil {
			out = append(out, p)
			continue
		}
		out = append(out, string(b))
	}
	return strings.Join(out, " . ")
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }
