package natsconn_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"tollgate/infra/natsconn"
	"tollgate/infra/testcert"
	"tollgate/infra/testenv"
)

// dial connects once, without the background retry Connect normally keeps up, so a
// refused sign-in is an error here rather than a retry loop.
func dial(t *testing.T, servers string, a natsconn.Auth) (*nats.Conn, error) {
	t.Helper()
	nc, err := natsconn.ConnectAuth(servers, t.Name(), a, nats.RetryOnFailedConnect(false), nats.MaxReconnects(0))
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuthNKey: a server whose only user is an NKey refuses a connection without the seed
// or with another seed, and takes one with TOLLGATE_NATS_NKEY's seed.
func TestAuthNKey(t *testing.T) {
	t.Parallel()
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	c := testenv.StartNATSClusterWith(t, testenv.NATSClusterOptions{Nodes: 1,
		Config: fmt.Sprintf("authorization { users: [ { nkey: %s } ] }", pub)})

	if _, err := dial(t, c.URLs(), natsconn.Auth{}); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("without a seed: %v, want an authorization violation", err)
	}
	if _, err := dial(t, c.URLs(), natsconn.Auth{NKey: writeFile(t, "other.nk", string(otherSeed))}); err == nil {
		t.Error("another user's seed was accepted")
	}
	nc, err := dial(t, c.URLs(), natsconn.Auth{NKey: writeFile(t, "user.nk", string(seed))})
	if err != nil {
		t.Fatalf("with the seed: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestAuthCreds: an operator-mode server refuses a connection without credentials or
// with a user of an account it does not know, and takes TOLLGATE_NATS_CREDS's.
func TestAuthCreds(t *testing.T) {
	t.Parallel()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	account := func(js bool) (nkeys.KeyPair, string, string) {
		acc, _ := nkeys.CreateAccount()
		accPub, _ := acc.PublicKey()
		ac := jwt.NewAccountClaims(accPub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		accJWT, err := ac.Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		return acc, accPub, accJWT
	}
	creds := func(acc nkeys.KeyPair) string {
		u, _ := nkeys.CreateUser()
		uPub, _ := u.PublicKey()
		uJWT, err := jwt.NewUserClaims(uPub).Encode(acc)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := u.Seed()
		b, err := jwt.FormatUserConfig(uJWT, seed)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, "user.creds", string(b))
	}
	acc, accPub, accJWT := account(true)
	_, sysPub, sysJWT := account(false) // JetStream needs a system account in operator mode
	stranger, _, _ := account(true)     // signed by the operator, but not preloaded into the server
	c := testenv.StartNATSClusterWith(t, testenv.NATSClusterOptions{Nodes: 1, Config: fmt.Sprintf(
		"operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: { %s: %q, %s: %q }",
		opJWT, sysPub, accPub, accJWT, sysPub, sysJWT)})

	if _, err := dial(t, c.URLs(), natsconn.Auth{}); err == nil {
		t.Error("a connection without credentials was accepted")
	}
	if _, err := dial(t, c.URLs(), natsconn.Auth{Creds: creds(stranger)}); err == nil {
		t.Error("a user of an unknown account was accepted")
	}
	nc, err := dial(t, c.URLs(), natsconn.Auth{Creds: creds(acc)})
	if err != nil {
		t.Fatalf("with the credentials: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestAuthTLS: a server that requires TLS and a client certificate from its CA refuses a
// client that does not trust its CA or has no certificate, and takes one with
// TOLLGATE_NATS_TLS_CA, _CERT and _KEY.
func TestAuthTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t)
	srv := ca.Issue(t, []string{"localhost"}, time.Time{}, time.Time{})
	caFile := writeFile(t, "ca.pem", ca.PEM)
	c := testenv.StartNATSClusterWith(t, testenv.NATSClusterOptions{Nodes: 1, Scheme: "tls", Config: fmt.Sprintf(
		"tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 2 }",
		writeFile(t, "server.pem", srv.CertPEM), writeFile(t, "server.key", srv.KeyPEM), caFile)})
	url := strings.Replace(c.URLs(), "127.0.0.1", "localhost", 1) // the name the certificate is for
	certPEM, keyPEM := clientCert(t, ca)
	cert, key := writeFile(t, "client.pem", certPEM), writeFile(t, "client.key", keyPEM)

	if _, err := dial(t, url, natsconn.Auth{}); err == nil {
		t.Error("a client that does not trust the server's CA connected")
	}
	if _, err := dial(t, url, natsconn.Auth{TLSCA: caFile}); err == nil {
		t.Error("a client without a certificate was accepted")
	}
	other := testcert.NewCA(t)
	otherCert, otherKey := clientCert(t, other)
	if _, err := dial(t, url, natsconn.Auth{TLSCA: caFile, TLSCert: writeFile(t, "o.pem", otherCert), TLSKey: writeFile(t, "o.key", otherKey)}); err == nil {
		t.Error("a certificate from another CA was accepted")
	}
	nc, err := dial(t, url, natsconn.Auth{TLSCA: caFile, TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}
	if st, err := nc.TLSConnectionState(); err != nil || len(st.PeerCertificates) == 0 {
		t.Errorf("connection not over TLS: %v", err)
	}
}

// clientCert issues a client certificate from ca, as PEM.
func clientCert(t *testing.T, ca *testcert.CA) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "tollgate-edge"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// TestAuthFilesCheckedAtStart: a missing or malformed file, or a malformed server list, is
// an error naming its setting before any connection is tried.
func TestAuthFilesCheckedAtStart(t *testing.T) {
	t.Parallel()
	garbage := writeFile(t, "garbage", "not a key\n")
	user, _ := nkeys.CreateUser()
	seed, _ := user.Seed()
	ca := testcert.NewCA(t)
	caFile := writeFile(t, "ca.pem", ca.PEM)
	for _, tc := range []struct {
		name, servers string
		auth          natsconn.Auth
		want          string
	}{
		{"creds missing", "nats://127.0.0.1:1", natsconn.Auth{Creds: "/nonexistent/user.creds"}, "TOLLGATE_NATS_CREDS"},
		{"creds garbage", "nats://127.0.0.1:1", natsconn.Auth{Creds: garbage}, "TOLLGATE_NATS_CREDS"},
		{"nkey missing", "nats://127.0.0.1:1", natsconn.Auth{NKey: "/nonexistent/user.nk"}, "TOLLGATE_NATS_NKEY"},
		{"nkey garbage", "nats://127.0.0.1:1", natsconn.Auth{NKey: garbage}, "TOLLGATE_NATS_NKEY"},
		{"both", "nats://127.0.0.1:1", natsconn.Auth{Creds: garbage, NKey: writeFile(t, "u.nk", string(seed))}, "set one"},
		{"ca missing", "tls://127.0.0.1:1", natsconn.Auth{TLSCA: "/nonexistent/ca.pem"}, "TOLLGATE_NATS_TLS_CA"},
		{"ca garbage", "tls://127.0.0.1:1", natsconn.Auth{TLSCA: garbage}, "TOLLGATE_NATS_TLS_CA"},
		{"cert without key", "tls://127.0.0.1:1", natsconn.Auth{TLSCA: caFile, TLSCert: caFile}, "TOLLGATE_NATS_TLS_KEY"},
		{"cert garbage", "tls://127.0.0.1:1", natsconn.Auth{TLSCert: garbage, TLSKey: garbage}, "TOLLGATE_NATS_TLS_CERT"},
		{"empty list", " ", natsconn.Auth{}, "TOLLGATE_NATS_URL"},
		{"empty entry", "nats://127.0.0.1:4222,,nats://127.0.0.1:4223", natsconn.Auth{}, "TOLLGATE_NATS_URL"},
		{"no scheme", "127.0.0.1:4222", natsconn.Auth{}, "TOLLGATE_NATS_URL"},
		{"http", "http://127.0.0.1:4222", natsconn.Auth{}, "scheme"},
		{"password hidden", "nats://u:hunter2@[::1", natsconn.Auth{}, "TOLLGATE_NATS_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			nc, err := natsconn.ConnectAuth(tc.servers, "test", tc.auth)
			if err == nil {
				nc.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q: want it to name %q (and never a password)", err, tc.want)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %s: the check must come before any dial", d)
			}
		})
	}
	// A list of good URLs passes the check.
	if err := natsconn.CheckServers("nats://a:4222, tls://b:4222,nats://user:pw@c"); err != nil {
		t.Errorf("a good list: %v", err)
	}
}
