// Package testenv gives each test its own slice of the machine's real services: a fresh
// Postgres database, a fresh in-process NATS server (or names unique to the test on a
// shared one) and a unique Redis key prefix. Everything is removed when the test ends, so
// tests run in parallel and leave nothing behind.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	"tollgate/infra/natsserver"
)

// AdminDatabaseURL is the server the test databases are created on. TOLLGATE_TEST_DATABASE_URL
// overrides it.
func AdminDatabaseURL() string {
	if u := os.Getenv("TOLLGATE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Name returns a short random name with the given prefix, safe as a database, bucket,
// stream or key prefix name.
func Name(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Postgres creates an empty database for the test and returns its URL. The database is
// dropped (with its connections) when the test ends.
func Postgres(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := AdminDatabaseURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("testenv: postgres at %s is not reachable (start it: pg_ctlcluster <ver> main start): %v", admin, err)
	}
	defer conn.Close(ctx)
	name := Name("tg_test_")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("testenv: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Logf("testenv: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("testenv: drop %s: %v", name, err)
		}
	})
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String()
}

// natsServers remembers where each test server listens and stores, since a server that
// has been shut down no longer reports either.
var natsServers sync.Map // *server.Server → natsInfo

type natsInfo struct {
	port int
	dir  string
}

// NATS starts an in-process NATS server with JetStream on a free port, storing in a
// directory of the test's, and shuts it down when the test ends. Restart it on the same
// port and directory with RestartNATS to simulate an outage.
func NATS(tb testing.TB) *server.Server {
	tb.Helper()
	dir := tb.TempDir()
	s, err := natsserver.Start(natsserver.Options{StoreDir: dir})
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(s.Shutdown)
	natsServers.Store(s, natsInfo{port: s.Addr().(*net.TCPAddr).Port, dir: dir})
	return s
}

// RestartNATS starts a server like s (same port, same store) after s was shut down.
func RestartNATS(tb testing.TB, s *server.Server) *server.Server {
	tb.Helper()
	v, ok := natsServers.Load(s)
	if !ok {
		tb.Fatalf("testenv: RestartNATS of a server not started by testenv.NATS")
	}
	info := v.(natsInfo)
	var (
		ns  *server.Server
		err error
	)
	// The old listener may take a moment to release the port.
	for i := 0; i < 50; i++ {
		ns, err = natsserver.Start(natsserver.Options{Port: info.port, StoreDir: info.dir})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("testenv: restart nats: %v", err)
	}
	tb.Cleanup(ns.Shutdown)
	natsServers.Store(ns, info)
	return ns
}

// RedisPrefix returns a key prefix unique to the test. Keys under it are the test's to
// delete (the helpers that use Redis do so in their own cleanup).
func RedisPrefix(tb testing.TB) string {
	return Name("tgtest_")
}

// WaitFor polls fn until it returns nil, and fails the test with fn's last error once
// total has passed.
func WaitFor(tb testing.TB, total time.Duration, fn func() error) {
	tb.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
