package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stack is one Tollgate deployment of the bench's own: a fresh database, a NATS prefix no
// one else uses, an api process and (when started) an edge process, all removed at the end.
type stack struct {
	b                   *bench
	name                string
	bin                 string // the tollgate binary its processes run (-compare runs two)
	edgeBin             string // the tollgate-edge binary its edges run; empty: `bin edge`
	dir                 string
	db, dbURL           string
	prefix              string
	token               string
	apiAddr, apiAdmin   string
	edgeAddr, edgeAdmin string
	api, edge           *proc
	client              *apiClient
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// buildTollgate builds the binaries under test from the repository root: tollgate and,
// unless -edge-binary says otherwise, tollgate-edge for the edges.
func (b *bench) buildTollgate(ctx context.Context) error {
	if b.bin != "" {
		return nil
	}
	b.bin = filepath.Join(b.dir, "tollgate")
	fmt.Fprintf(os.Stderr, "bench: go build -o %s .\n", b.bin)
	if err := goBuild(ctx, b.root, b.bin); err != nil {
		return fmt.Errorf("building tollgate: %w", err)
	}
	if b.edgeBinary == "tollgate" {
		return nil
	}
	b.edgeBin = filepath.Join(b.dir, "tollgate-edge")
	fmt.Fprintf(os.Stderr, "bench: go build -o %s ./cmd/tollgate-edge\n", b.edgeBin)
	if err := goBuild(ctx, filepath.Join(b.root, "cmd", "tollgate-edge"), b.edgeBin); err != nil {
		return fmt.Errorf("building tollgate-edge: %w", err)
	}
	return nil
}

// edgeArgv is the command line of an edge of s.
func (s *stack) edgeArgv() []string {
	if s.edgeBin != "" {
		return []string{s.edgeBin}
	}
	return []string{s.bin, "edge"}
}

// newStack creates the database, migrates it, and starts the api pinned to apiCPUs (empty:
// anywhere) with the outbox relay publishing into this stack's bucket, apiEnv added to its
// environment.
func (b *bench) newStack(ctx context.Context, name, apiCPUs string, apiEnv ...string) (*stack, error) {
	id := randomHex(4)
	s := &stack{
		b:       b,
		name:    name,
		bin:     b.bin,
		edgeBin: b.edgeBin,
		dir:     filepath.Join(b.dir, "stack-"+name),
		db:      "tgbench_" + name + "_" + id,
		prefix:  "tgbench_" + name + "_" + id,
		token:   randomHex(24),
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	s.apiAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	s.edgeAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	s.edgeAdmin = fmt.Sprintf("127.0.0.1:%d", ports[2])
	// The api's admin listener on a port of its own: the default (9080) may be another
	// stack's on this machine.
	s.apiAdmin = fmt.Sprintf("127.0.0.1:%d", ports[3])
	s.client = &apiClient{base: "http://" + s.apiAddr, token: s.token, hc: b.http}

	if err := s.createDB(ctx); err != nil {
		return nil, err
	}
	b.clean.add(func() {
		if err := deleteNATS(b.natsURL, s.prefix); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cleanup NATS %s: %v\n", s.prefix, err)
		}
	})
	if b.redisURL != "" {
		b.clean.add(func() {
			if err := deleteRedisPrefix(b.redisURL, s.prefix); err != nil {
				fmt.Fprintf(os.Stderr, "bench: cleanup Redis %s:*: %v\n", s.prefix, err)
			}
		})
	}

	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, s.bin, "migrate")
	cmd.Env = s.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tollgate migrate (%s): %v\n%s", s.dbURL, err, out)
	}

	p, err := startProc("tollgate api", filepath.Join(s.dir, "api.log"), apiCPUs, s.env(apiEnv...), s.bin, "api")
	if err != nil {
		return nil, err
	}
	s.api = p
	b.clean.add(p.stop)
	if err := waitHTTP(ctx, b, "tollgate api /readyz", "http://"+s.apiAddr+"/readyz", b.readyTimeout, p); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) createDB(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.b.pgAdmin)
	if err != nil {
		return fmt.Errorf("postgres at %s is not reachable (bash .ci/services starts it): %v", s.b.pgAdmin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+s.db); err != nil {
		return fmt.Errorf("create database %s: %v", s.db, err)
	}
	s.b.clean.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.b.pgAdmin)
		if err == nil {
			_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+s.db+" WITH (FORCE)")
			c.Close(ctx)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", s.db, err)
		}
	})
	u, err := url.Parse(s.b.pgAdmin)
	if err != nil {
		return err
	}
	u.Path = "/" + s.db
	s.dbURL = u.String()
	return nil
}

// env is the process environment for this stack's processes: the bench's own environment
// without any TOLLGATE_* or GOMAXPROCS it had, plus the stack's settings and extra.
func (s *stack) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TOLLGATE_") || strings.HasPrefix(kv, "GOMAXPROCS=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"TOLLGATE_DATABASE_URL="+s.dbURL,
		"TOLLGATE_NATS_URL="+s.b.natsURL,
		"TOLLGATE_NATS_PREFIX="+s.prefix,
		"TOLLGATE_ADMIN_TOKEN="+s.token,
		"TOLLGATE_API_ADDR="+s.apiAddr,
		"TOLLGATE_API_ADMIN_ADDR="+s.apiAdmin,
		"TOLLGATE_EDGE_ADDR="+s.edgeAddr,
		"TOLLGATE_EDGE_ADMIN_ADDR="+s.edgeAdmin,
		"TOLLGATE_EDGE_DOMAIN=localhost",
		"TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.0/8",
		"TOLLGATE_LOG_LEVEL=warn",
	)
	if s.b.redisURL != "" {
		env = append(env, "TOLLGATE_REDIS_URL="+s.b.redisURL, "TOLLGATE_REDIS_PREFIX="+s.prefix)
	}
	return append(env, extra...)
}

// startEdge starts an edge with GOMAXPROCS=procs pinned to cpus (empty: anywhere), with
// env added to its environment (S9's TLS listener), and waits until its admin port
// reports ready.
func (s *stack) startEdge(ctx context.Context, procs int, cpus string, env ...string) error {
	// Metering is on unless -meter-off; its spool is the run's, removed with it.
	extra := append([]string{"TOLLGATE_METER_SPOOL_DIR=" + filepath.Join(s.dir, fmt.Sprintf("meter-spool-%d", procs))}, env...)
	extra = append(extra, edgeEnvList()...)
	name := "tollgate edge"
	if s.b.meterOff {
		extra = append(extra, "TOLLGATE_METER=off")
		name += " (metering off)"
	}
	if procs > 0 {
		extra = append(extra, fmt.Sprintf("GOMAXPROCS=%d", procs))
		name += fmt.Sprintf(" (GOMAXPROCS=%d)", procs)
	}
	p, err := startProc(name, filepath.Join(s.dir, fmt.Sprintf("edge-%d.log", procs)), cpus, s.env(extra...), s.edgeArgv()...)
	if err != nil {
		return err
	}
	s.edge = p
	s.b.clean.add(p.stop)
	return waitHTTP(ctx, s.b, "tollgate edge /readyz", "http://"+s.edgeAdmin+"/readyz", s.b.readyTimeout, p)
}

func (s *stack) stopEdge() {
	if s.edge != nil {
		s.edge.stop()
		s.edge = nil
	}
}

func waitHTTP(ctx context.Context, b *bench, what, url string, timeout time.Duration, p *proc) error {
	return waitFor(ctx, what, timeout, 50*time.Millisecond, p, func() error {
		resp, err := b.http.Get(url)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	})
}

// deleteNATS removes every stream (KV buckets included) whose name carries the prefix.
func deleteNATS(natsURL, prefix string) error {
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	l := js.StreamNames(ctx)
	for n := range l.Name() {
		for _, p := range []string{prefix, "KV_" + prefix, "OBJ_" + prefix} {
			if strings.HasPrefix(n, p) {
				names = append(names, n)
				break
			}
		}
	}
	if err := l.Err(); err != nil {
		return err
	}
	for _, n := range names {
		if err := js.DeleteStream(ctx, n); err != nil {
			return fmt.Errorf("delete stream %s: %v", n, err)
		}
	}
	return nil
}

// apiClient speaks the management API as an operator would, with the admin token.
type apiClient struct {
	base, token string
	hc          *http.Client
}

func (c *apiClient) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading response: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: response %q: %v", method, path, b, err)
		}
	}
	return nil
}

type created struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

func (c *apiClient) createTenant(ctx context.Context, slug string) (string, error) {
	var t created
	// The platform plan without limits: the scenarios set the limits they measure.
	err := c.call(ctx, "POST", "/v1/tenants", map[string]any{"slug": slug, "name": slug, "plan": "unlimited"}, &t)
	return t.ID, err
}

// routeBody is a route as the management API takes it.
func routeBody(name, path, upstream, auth string, limit bool) map[string]any {
	r := map[string]any{
		"name":     name,
		"paths":    []string{path},
		"upstream": map[string]any{"targets": []map[string]any{{"url": upstream}}},
		"auth":     auth,
	}
	if limit {
		// A limit the bench never reaches, so only its bookkeeping is measured.
		r["rate_limit"] = map[string]any{"rps": 1_000_000, "burst": 1_000_000}
	}
	return r
}

// createRoutes creates n routes of tenant slug with workers concurrent clients. body(i)
// gives route i; done(i, id, at) is called with the time its 201 arrived.
func (c *apiClient) createRoutes(ctx context.Context, slug string, n, workers int, body func(i int) map[string]any, done func(i int, id string, at time.Time)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				var r created
				if err := c.call(ctx, "POST", "/v1/tenants/"+slug+"/routes", body(i), &r); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("creating route %d of %d: %w", i, n, err); cancel() })
					return
				}
				if done != nil {
					done(i, r.ID, time.Now())
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// edgeStatus requests path of host on the edge (or any gateway at base) and returns the status.
func edgeStatus(ctx context.Context, hc *http.Client, base, host, path string, headers map[string]string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitServed polls until every path of host answers 200 through the gateway at base.
func waitServed(ctx context.Context, b *bench, p *proc, base, host string, paths []string, headers map[string]string) error {
	pending := paths
	what := fmt.Sprintf("%s to serve %d route(s) of %s", base, len(paths), host)
	return waitFor(ctx, what, b.readyTimeout, 100*time.Millisecond, p, func() error {
		var (
			mu      sync.Mutex
			still   []string
			lastErr error
			wg      sync.WaitGroup
			next    atomic.Int64
		)
		for range min(8, len(pending)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(pending) {
						return
					}
					code, err := edgeStatus(ctx, b.http, base, host, pending[i], headers)
					if err != nil || code != http.StatusOK {
						mu.Lock()
						still = append(still, pending[i])
						if err == nil {
							err = fmt.Errorf("GET %s: status %d", pending[i], code)
						}
						lastErr = err
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		pending = still
		if len(pending) > 0 {
			return fmt.Errorf("%d not served yet, e.g. %v", len(pending), lastErr)
		}
		return nil
	})
}
