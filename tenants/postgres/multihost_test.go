package postgres_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// withHosts returns raw with its host list replaced by hosts and query's parameters added.
func withHosts(t *testing.T, raw string, hosts []string, query string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = strings.Join(hosts, ",")
	q := u.Query()
	extra, _ := url.ParseQuery(query)
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A URL naming an unreachable host first and the real server second: the migrations, the
// pool, and the relay's own session (its advisory lock and LISTEN) all reach the second.
func TestMultiHostURLSkipsUnreachableHost(t *testing.T) {
	t.Parallel()
	_, direct := openDB(t)
	multi := withHosts(t, direct, []string{deadAddr(t), hostOf(t, direct)}, "target_session_attrs=read-write&connect_timeout=5")
	ctx := context.Background()
	if err := postgres.Migrate(ctx, multi); err != nil {
		t.Fatalf("migrate through %s: %v", multi, err)
	}
	db, err := postgres.Open(ctx, multi)
	if err != nil {
		t.Fatalf("open %s: %v", multi, err)
	}
	defer db.Close()
	pub := &recorder{}
	r := postgres.NewRelay(db, pub, testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, time.Minute, 1000)
	start(t, r)
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !r.Status().Active {
			return errors.New("relay not active")
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // into its LISTEN wait
	began := time.Now()
	mustTenant(t, db, "acme")
	conn := rawConn(t, direct)
	waitSent(t, conn)
	// The poll interval is a minute: publishing this soon means the notification woke it.
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("published after %v", d)
	}
	wantPublishedExactly(t, pub, allRows(t, conn))
}

// A read-only server first (a hot standby answers transaction_read_only = on; a proxy
// that asks the real server for read-only sessions stands in for one) and the primary
// second: with target_session_attrs=read-write every connection lands on the primary;
// without it, writes fail on the standby.
func TestMultiHostURLReadWrite(t *testing.T) {
	t.Parallel()
	_, direct := openDB(t)
	standby := startReadOnlyProxy(t, hostOf(t, direct))
	ctx := context.Background()

	rw := withHosts(t, direct, []string{standby.addr, hostOf(t, direct)}, "target_session_attrs=read-write")
	if err := postgres.Migrate(ctx, rw); err != nil {
		t.Fatalf("migrate through %s: %v", rw, err)
	}
	db, err := postgres.Open(ctx, rw)
	if err != nil {
		t.Fatalf("open %s: %v", rw, err)
	}
	defer db.Close()
	if err := db.CreateTenant(ctx, &tenants.Tenant{Slug: "acme", PlatformPlan: tenants.PlatformUnlimited}); err != nil {
		t.Fatalf("write through %s: %v", rw, err)
	}
	if standby.conns.Load() == 0 {
		t.Fatal("the standby was never tried: the test proves nothing")
	}

	// The relay's own session (it marks rows sent) lands on the primary too.
	pub := &recorder{}
	r := postgres.NewRelay(db, pub, testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, 200*time.Millisecond, 1000)
	start(t, r)
	conn := rawConn(t, direct)
	waitSent(t, conn)
	wantPublishedExactly(t, pub, allRows(t, conn))

	plain := withHosts(t, direct, []string{standby.addr, hostOf(t, direct)}, "")
	db2, err := postgres.Open(ctx, plain)
	if err != nil {
		t.Fatalf("open %s: %v", plain, err)
	}
	defer db2.Close()
	err = db2.CreateTenant(ctx, &tenants.Tenant{Slug: "beta", PlatformPlan: tenants.PlatformUnlimited})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Fatalf("a write on the standby without target_session_attrs: %v, want read_only_sql_transaction", err)
	}
}

type readOnlyProxy struct {
	addr  string
	conns atomic.Int64
}

// startReadOnlyProxy forwards connections to target, adding
// "-c default_transaction_read_only=on" to each session's startup options.
func startReadOnlyProxy(t *testing.T, target string) *readOnlyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &readOnlyProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c, target)
			}()
		}
	}()
	return p
}

const (
	sslRequestCode  = 80877103
	gssEncRequest   = 80877104
	protocolVersion = 196608
)

func (p *readOnlyProxy) serve(c net.Conn, target string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var msg []byte
	for {
		var err error
		if msg, err = readStartup(c); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code != sslRequestCode && code != gssEncRequest {
			break
		}
		if _, err := c.Write([]byte{'N'}); err != nil { // no TLS, no GSS encryption
			return
		}
	}
	if binary.BigEndian.Uint32(msg[4:8]) != protocolVersion {
		return
	}
	params := strings.Split(string(msg[8:len(msg)-1]), "\x00")
	var out []byte
	out = binary.BigEndian.AppendUint32(out, 0)
	out = binary.BigEndian.AppendUint32(out, protocolVersion)
	options := "-c default_transaction_read_only=on"
	for i := 0; i+1 < len(params); i += 2 {
		if params[i] == "options" {
			options = params[i+1] + " " + options
			continue
		}
		out = append(append(append(append(out, params[i]...), 0), params[i+1]...), 0)
	}
	out = append(append(append(append(out, "options"...), 0), options...), 0)
	out = append(out, 0)
	binary.BigEndian.PutUint32(out, uint32(len(out)))
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := s.Write(out); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, s)
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(s, c)
	s.Close()
	<-done
}

func readStartup(c net.Conn) ([]byte, error) {
	head := make([]byte, 4)
	if _, err := io.ReadFull(c, head); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head)
	if n < 8 || n > 10000 {
		return nil, errors.New("bad startup length")
	}
	msg := make([]byte, n)
	copy(msg, head)
	_, err := io.ReadFull(c, msg[4:])
	return msg, err
}
