package main

// S9: TLS 1.3 terminated by the gateway, plain HTTP to the upstream.
//
// Both gateways get the same certificate (ECDSA P-256, *.localhost) and TLS 1.3 only
// (nginx: ssl_protocols TLSv1.3; the client offers nothing older). The load comes from
// the bench's own closed-loop client (load.go), not wrk: wrk sends the URL's host as
// SNI, which must then be an IP literal here (*.localhost does not resolve on every
// machine), and Tollgate rightly refuses a Host whose tenant the SNI does not name (421).
// The client sends SNI tls.localhost and offers X25519 only, so both gateways do the
// same key exchange (Go would otherwise pick its post-quantum hybrid, which nginx's
// OpenSSL lacks). Three runs per gateway, same client:
//
//   - S9p: plain HTTP, keep-alive — the baseline, so the TLS tax is S9 ÷ S9p;
//   - S9: TLS, keep-alive — the per-request cost of encryption;
//   - S9h: TLS, one request per connection — every request pays a full handshake (the
//     client keeps no session tickets), so µs/req there is CPU per handshake plus a
//     request, and its QPS is handshakes per second.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// writeCert makes the run's self-signed certificate for *.localhost and writes it and
// its key where nginx and the edge read them.
func (b *bench) writeCert() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "*.localhost"},
		DNSNames:     []string{"*.localhost", "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	dir := filepath.Join(b.dir, "tls")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cert, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	b.tlsCert, b.tlsKey = cert, keyPath
	return nil
}
