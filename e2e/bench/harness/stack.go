package harness

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

// Env is what every stack and process of one run shares: the run's directory and
// cleanups, the services the stacks use and the binaries they run.
type Env struct {
	Dir          string // the run's temp directory
	Clean        *Cleanups
	HTTP         *http.Client
	ReadyTimeout time.Duration // how long a process or config may take to be ready
	NatsURL      string
	PGAdmin      string   // Postgres to create the stacks' databases on
	RedisURL     string   // TOLLGATE_REDIS_URL for the edges; empty: local limits only
	MeterOff     bool     // the edges run with TOLLGATE_METER=off
	EdgeEnv      []string // VAR=value settings added to every edge's environment
	LoadCPUs     string   // CPUs of the load side: wrk, the upstreams, the bench's own generators
	Bin          string   // the tollgate binary new stacks run
	EdgeBin      string   // the tollgate-edge binary their edges run; empty: `Bin edge`

	// What the nginx proxy is given, once the run has it.
	NginxForward    bool   // nginx adds the forwarding headers and request id Tollgate adds
	CanaryPort      int    // S4's canary upstream
	WSPort          int    // S6's WebSocket echo upstream
	TLSCert, TLSKey string // S9's and S1h2's certificate and key (WriteCert)
	GRPCPort        int    // S1grpc's gRPC health upstream
	GRPCKeepalive   int    // nginx's idle connections kept to GRPCPort; 0: 64
}

// Stack is one Tollgate deployment of the bench's own: a fresh database, a NATS prefix no
// one else uses, an api process and (when started) an edge process, all removed at the end.
type Stack struct {
	env                 *Env
	Name                string
	Bin                 string // the tollgate binary its processes run (-compare runs two)
	EdgeBin             string // the tollgate-edge binary its edges run; empty: `Bin edge`
	Dir                 string
	DB, DBURL           string
	Prefix              string
	Token               string
	APIAddr, APIAdmin   string
	EdgeAddr, EdgeAdmin string
	API, Edge           *Proc
	Client              *APIClient
}

func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// EdgeArgv is the command line of an edge of s.
func (s *Stack) EdgeArgv() []string {
	if s.EdgeBin != "" {
		return []string{s.EdgeBin}
	}
	return []string{s.Bin, "edge"}
}

// NewStack creates the database, migrates it, and starts the api pinned to apiCPUs (empty:
// anywhere) with the outbox relay publishing into this stack's bucket, apiEnv added to its
// environment. It runs env's Bin and EdgeBin as they are when it is called.
func (b *Env) NewStack(ctx context.Context, name, apiCPUs string, apiEnv ...string) (*Stack, error) {
	id := RandomHex(4)
	s := &Stack{
		env:     b,
		Name:    name,
		Bin:     b.Bin,
		EdgeBin: b.EdgeBin,
		Dir:     filepath.Join(b.Dir, "stack-"+name),
		DB:      "tgbench_" + name + "_" + id,
		Prefix:  "tgbench_" + name + "_" + id,
		Token:   RandomHex(24),
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	var ports [4]int
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	s.APIAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	s.EdgeAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	s.EdgeAdmin = fmt.Sprintf("127.0.0.1:%d", ports[2])
	// The api's admin listener on a port of its own: the default (9080) may be another
	// stack's on this machine.
	s.APIAdmin = fmt.Sprintf("127.0.0.1:%d", ports[3])
	s.Client = &APIClient{base: "http://" + s.APIAddr, token: s.Token, hc: b.HTTP}

	if err := s.createDB(ctx); err != nil {
		return nil, err
	}
	b.Clean.Add(func() {
		if err := deleteNATS(b.NatsURL, s.Prefix); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cleanup NATS %s: %v\n", s.Prefix, err)
		}
	})
	if b.RedisURL != "" {
		b.Clean.Add(func() {
			if err := deleteRedisPrefix(b.RedisURL, s.Prefix); err != nil {
				fmt.Fprintf(os.Stderr, "bench: cleanup Redis %s:*: %v\n", s.Prefix, err)
			}
		})
	}

	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, s.Bin, "migrate")
	cmd.Env = s.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tollgate migrate (%s): %v\n%s", s.DBURL, err, out)
	}

	p, err := StartProc("tollgate api", filepath.Join(s.Dir, "api.log"), apiCPUs, s.Env(apiEnv...), s.Bin, "api")
	if err != nil {
		return nil, err
	}
	s.API = p
	b.Clean.Add(p.Stop)
	if err := b.WaitHTTP(ctx, "tollgate api /readyz", "http://"+s.APIAddr+"/readyz", b.ReadyTimeout, p); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) createDB(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.env.PGAdmin)
	if err != nil {
		return fmt.Errorf("postgres at %s is not reachable (bash .ci/services starts it): %v", s.env.PGAdmin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+s.DB); err != nil {
		return fmt.Errorf("create database %s: %v", s.DB, err)
	}
	s.env.Clean.Add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.env.PGAdmin)
		if err == nil {
			_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+s.DB+" WITH (FORCE)")
			c.Close(ctx)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", s.DB, err)
		}
	})
	u, err := url.Parse(s.env.PGAdmin)
	if err != nil {
		return err
	}
	u.Path = "/" + s.DB
	s.DBURL = u.String()
	return nil
}

// Env is the process environment for this stack's processes: the bench's own environment
// without any TOLLGATE_* or GOMAXPROCS it had, plus the Stack's settings and extra.
func (s *Stack) Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TOLLGATE_") || strings.HasPrefix(kv, "GOMAXPROCS=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"TOLLGATE_DATABASE_URL="+s.DBURL,
		"TOLLGATE_NATS_URL="+s.env.NatsURL,
		"TOLLGATE_NATS_PREFIX="+s.Prefix,
		"TOLLGATE_ADMIN_TOKEN="+s.Token,
		"TOLLGATE_API_ADDR="+s.APIAddr,
		"TOLLGATE_API_ADMIN_ADDR="+s.APIAdmin,
		"TOLLGATE_EDGE_ADDR="+s.EdgeAddr,
		"TOLLGATE_EDGE_ADMIN_ADDR="+s.EdgeAdmin,
		"TOLLGATE_EDGE_DOMAIN=localhost",
		"TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.0/8",
		"TOLLGATE_LOG_LEVEL=warn",
	)
	if s.env.RedisURL != "" {
		env = append(env, "TOLLGATE_REDIS_URL="+s.env.RedisURL, "TOLLGATE_REDIS_PREFIX="+s.Prefix)
	}
	return append(env, extra...)
}

// StartEdge starts an edge with GOMAXPROCS=procs pinned to cpus (empty: anywhere), with
// env added to its environment (S9's TLS listener), and waits until its admin port
// reports ready.
func (s *Stack) StartEdge(ctx context.Context, procs int, cpus string, env ...string) error {
	// Metering is on unless -meter-off; its spool is the run's, removed with it.
	extra := append([]string{"TOLLGATE_METER_SPOOL_DIR=" + filepath.Join(s.Dir, fmt.Sprintf("meter-spool-%d", procs))}, env...)
	extra = append(extra, s.env.EdgeEnv...)
	name := "tollgate edge"
	if s.env.MeterOff {
		extra = append(extra, "TOLLGATE_METER=off")
		name += " (metering off)"
	}
	if procs > 0 {
		extra = append(extra, fmt.Sprintf("GOMAXPROCS=%d", procs))
		name += fmt.Sprintf(" (GOMAXPROCS=%d)", procs)
	}
	p, err := StartProc(name, filepath.Join(s.Dir, fmt.Sprintf("edge-%d.log", procs)), cpus, s.Env(extra...), s.EdgeArgv()...)
	if err != nil {
		return err
	}
	s.Edge = p
	s.env.Clean.Add(p.Stop)
	return s.env.WaitHTTP(ctx, "tollgate edge /readyz", "http://"+s.EdgeAdmin+"/readyz", s.env.ReadyTimeout, p)
}

// StopEdge stops the edge, if one runs.
func (s *Stack) StopEdge() {
	if s.Edge != nil {
		s.Edge.Stop()
		s.Edge = nil
	}
}

// WaitHTTP polls url until it answers 200, p dies or timeout passes.
func (b *Env) WaitHTTP(ctx context.Context, what, url string, timeout time.Duration, p *Proc) error {
	return WaitFor(ctx, what, timeout, 50*time.Millisecond, p, func() error {
		resp, err := b.HTTP.Get(url)
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

// APIClient speaks the management API as an operator would, with the admin token.
type APIClient struct {
	base, token string
	hc          *http.Client
}

// Call sends in as JSON (when not nil) and decodes a 2xx answer into out (when not nil).
func (c *APIClient) Call(ctx context.Context, method, path string, in, out any) error {
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

// Created is what a create answers: the new object's id, and a new key's secret.
type Created struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

// CreateTenant creates a tenant on the platform plan without limits.
func (c *APIClient) CreateTenant(ctx context.Context, slug string) (string, error) {
	var t Created
	// The platform plan without limits: the scenarios set the limits they measure.
	err := c.Call(ctx, "POST", "/v1/tenants", map[string]any{"slug": slug, "name": slug, "plan": "unlimited"}, &t)
	return t.ID, err
}

// RouteBody is a route as the management API takes it.
func RouteBody(name, path, upstream, auth string, limit bool) map[string]any {
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

// CreateRoutes creates n routes of tenant slug with workers concurrent clients. body(i)
// gives route i; done(i, id, at) is called with the time its 201 arrived.
func (c *APIClient) CreateRoutes(ctx context.Context, slug string, n, workers int, body func(i int) map[string]any, done func(i int, id string, at time.Time)) error {
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
				var r Created
				if err := c.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", body(i), &r); err != nil {
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

// EdgeStatus requests path of host on the edge (or any gateway at base) and returns the status.
func EdgeStatus(ctx context.Context, hc *http.Client, base, host, path string, headers map[string]string) (int, error) {
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

// WaitServed polls until every path of host answers 200 through the gateway at base.
func (b *Env) WaitServed(ctx context.Context, p *Proc, base, host string, paths []string, headers map[string]string) error {
	pending := paths
	what := fmt.Sprintf("%s to serve %d route(s) of %s", base, len(paths), host)
	return WaitFor(ctx, what, b.ReadyTimeout, 100*time.Millisecond, p, func() error {
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
					code, err := EdgeStatus(ctx, b.HTTP, base, host, pending[i], headers)
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

// CallMatch sends a full replacement with If-Match: * (whatever the current version).
func (c *APIClient) CallMatch(ctx context.Context, method, path string, in any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(string(raw)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", "*")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// PutPlatformPlan creates or overwrites a platform plan (If-Match: *).
func (c *APIClient) PutPlatformPlan(ctx context.Context, name string, body map[string]any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "PUT", c.base+"/v1/platform/plans/"+name, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", "*")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("PUT /v1/platform/plans/%s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /v1/platform/plans/%s: status %d: %s", name, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// CallRetry is Call for an idempotent write (a config apply without prune: applying a
// document again changes nothing), sent again up to twice when the connection fails:
// the api may close an idle keep-alive connection just as a request goes out on it.
func (c *APIClient) CallRetry(ctx context.Context, method, path string, in any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.hc.Do(req)
		if err != nil {
			if try < 3 && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("%s %s: %v", method, path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s %s: reading response: %v", method, path, err)
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	}
}

// PutBytes sends body as is with contentType (a function's module: application/wasm).
func (c *APIClient) PutBytes(ctx context.Context, path, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", contentType)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT %s: status %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}
