package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NginxBin is the Debian nginx the bench runs, as upstream and as the proxy to beat.
func NginxBin() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	return "/usr/sbin/nginx"
}

// nginxMain is the part of every nginx configuration that keeps it in the bench's own
// prefix: foreground master, its own pid file, logs and temp paths, no access log.
func nginxMain(dir string, workers int) string {
	user := ""
	if os.Geteuid() == 0 {
		// Workers would otherwise drop to nobody, who cannot enter the 0700 temp prefix.
		user = "user root root;\n"
	}
	return fmt.Sprintf(`%sdaemon off;
master_process on;
worker_processes %d;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 8192; multi_accept on; }
`, user, workers, dir, dir)
}

// BigPath is where a bench upstream serves BigSize bytes (S5's responses) from a file.
const (
	BigPath = "/s5/1m"
	BigSize = 1 << 20
)

// CanaryWeight is the percent of requests the nginx proxy's bench_canary_split sends to
// the canary upstream (S4's split).
const CanaryWeight = 5

// StartUpstream starts the fast upstream every gateway proxies to: nginx, one worker,
// answering 200 "ok" on every path, keep-alive without a request cap. It also serves S5's
// 1 MiB body from a file (sendfile: the upstream's cost stays small) and its request
// count on /__bench_status (S4 counts each side of the split from it).
func (b *Env) StartUpstream(ctx context.Context, port int) (*Proc, error) {
	return b.StartUpstreamNamed(ctx, "upstream nginx", "upstream", port, "ok")
}

// StartUpstreamNamed is StartUpstream with its own name, directory and answer (S4's
// canary upstream answers "canary").
func (b *Env) StartUpstreamNamed(ctx context.Context, name, dirName string, port int, answer string) (*Proc, error) {
	dir := filepath.Join(b.Dir, dirName)
	big := filepath.Join(dir, "www", strings.TrimPrefix(BigPath, "/"))
	if err := os.MkdirAll(filepath.Dir(big), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), BigSize/16), 0o644); err != nil {
		return nil, err
	}
	conf := nginxMain(dir, 1) + fmt.Sprintf(`http {
	access_log off;
	keepalive_requests 1000000;
	keepalive_timeout 120s;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	server {
		listen 127.0.0.1:%[2]d default_server backlog=4096;
		location = %[3]s { stub_status; }
		location = %[4]s { root %[1]s/www; default_type application/octet-stream; }
		location / { default_type text/plain; return 200 %[5]q; }
	}
}
`, dir, port, upstreamStatusPath, BigPath, answer)
	return b.startNginx(ctx, name, dir, conf, b.LoadCPUs, port)
}

// upstreamStatusPath is where a bench upstream reports its request count.
const upstreamStatusPath = "/__bench_status"

// UpstreamRequests is the number of requests the upstream nginx on port has answered,
// not counting this one (stub_status counts the request that asks).
func (b *Env) UpstreamRequests(ctx context.Context, port int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, upstreamStatusPath), nil)
	if err != nil {
		return 0, err
	}
	resp, err := b.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	// "Active connections: 1 \nserver accepts handled requests\n 5 5 42 \n..."
	lines := strings.Split(string(body), "\n")
	if len(lines) < 3 {
		return 0, fmt.Errorf("stub_status on port %d: %q", port, body)
	}
	f := strings.Fields(lines[2])
	if len(f) < 3 {
		return 0, fmt.Errorf("stub_status on port %d: %q", port, body)
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stub_status on port %d: %q", port, body)
	}
	return n - 1, nil
}

// ProxySite is one virtual host of the nginx proxy, mirroring a tenant's Tollgate routes.
type ProxySite struct {
	Host string
	Locs []ProxyLoc
}

// ProxyLoc is one location of a site: a path prefix, proxied to the upstream.
type ProxyLoc struct {
	Path     string
	Key      string // when set, X-API-Key must equal it (S2's key auth)
	Limit    bool   // S2's never-triggered rate limit
	Authz    string // when set, Authorization must equal it (S2j's stand-in for JWT auth)
	Upstream string // the upstream block; empty: bench_upstream (S4: bench_canary_split)
	WS       bool   // S6: a WebSocket location, proxied to bench_ws with the upgrade headers
	GRPC     bool   // S1grpc: a gRPC location, passed to bench_grpc over HTTP/2 (grpc_pass)
}

// ProxyListeners are the nginx proxy's listeners beside its plain HTTP/1.1 port, each on
// every site; 0: none.
type ProxyListeners struct {
	TLS   int // TLS 1.3, HTTP/1.1 (S9)
	H2TLS int // TLS 1.3 with ALPN h2 (S1h2): a port of its own, so S9 stays HTTP/1.1
	H2C   int // HTTP/2 in clear with prior knowledge (S1grpc)
}

// nginxForwardConf makes nginx tell the upstream what the edge tells it (edge/proxy.go's
// forwardHeaders: the client's address, scheme and host, a request id) and return the id
// to the client, as the edge does, so the two put the same headers on the wire
// (-nginx-forward). $request_id is 16 random bytes in hex, the edge's a counter's.
const nginxForwardConf = "\t\t\tproxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n" +
	"\t\t\tproxy_set_header X-Forwarded-Proto $scheme;\n" +
	"\t\t\tproxy_set_header X-Forwarded-Host $host;\n" +
	"\t\t\tproxy_set_header X-Request-Id $request_id;\n" +
	"\t\t\tadd_header X-Request-Id $request_id always;\n"

// StartProxy starts the nginx proxy under test: workers workers pinned to cpus, an upstream
// block with keepalive 64 and HTTP/1.1 with the Connection header cleared, as the nginx
// docs recommend for upstream keep-alive. With tlsPort set every site is also served
// over TLS 1.3 there (S9), with the certificate the edge gets.
func (b *Env) StartProxy(ctx context.Context, port, tlsPort, upPort, workers int, cpus string, sites []ProxySite) (*Proc, error) {
	return b.StartProxyOn(ctx, port, ProxyListeners{TLS: tlsPort}, upPort, workers, cpus, sites)
}

// StartProxyOn is StartProxy with HTTP/2 listeners too: nginx 1.22's `listen … http2`,
// which applies to the whole address, hence ports of their own. gRPC locations reach
// b.GRPCPort through an upstream block with keepalive b.GRPCKeepalive (64 unless set):
// nginx's grpc_pass runs one stream per upstream connection, so a cache smaller than the
// calls in flight would have it open and close connections all along.
func (b *Env) StartProxyOn(ctx context.Context, port int, ls ProxyListeners, upPort, workers int, cpus string, sites []ProxySite) (*Proc, error) {
	tlsPort := ls.TLS
	dir := filepath.Join(b.Dir, fmt.Sprintf("proxy-%dw", workers))
	var s strings.Builder
	s.WriteString(nginxMain(dir, workers))
	fmt.Fprintf(&s, `http {
	access_log off;
	keepalive_requests 1000000;
	keepalive_timeout 120s;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	server_names_hash_bucket_size 128;
	upstream bench_upstream {
		server 127.0.0.1:%[2]d;
		keepalive 64;
		keepalive_requests 1000000;
	}
	limit_req_zone $binary_remote_addr zone=bench_limit:1m rate=1000000r/s;
`, dir, upPort)
	if b.CanaryPort != 0 {
		// S4: smooth weighted round-robin, an exact 95/5 schedule like Tollgate's canary.
		fmt.Fprintf(&s, `	upstream bench_canary_split {
		server 127.0.0.1:%d weight=%d;
		server 127.0.0.1:%d weight=%d;
		keepalive 64;
		keepalive_requests 1000000;
	}
`, upPort, 100-CanaryWeight, b.CanaryPort, CanaryWeight)
	}
	if b.WSPort != 0 {
		fmt.Fprintf(&s, "\tupstream bench_ws { server 127.0.0.1:%d; }\n", b.WSPort)
	}
	if b.GRPCPort != 0 {
		keep := b.GRPCKeepalive
		if keep == 0 {
			keep = 64
		}
		fmt.Fprintf(&s, "\tupstream bench_grpc {\n\t\tserver 127.0.0.1:%d;\n\t\tkeepalive %d;\n\t\tkeepalive_requests 1000000;\n\t}\n", b.GRPCPort, keep)
	}
	listens := "" // every listener but the plain port's, on every server
	if tlsPort != 0 || ls.H2TLS != 0 {
		// Same certificate (ECDSA P-256) and protocol as the edge's TLS listener.
		fmt.Fprintf(&s, "\tssl_certificate %s;\n\tssl_certificate_key %s;\n\tssl_protocols TLSv1.3;\n", b.TLSCert, b.TLSKey)
	}
	if tlsPort != 0 {
		listens = fmt.Sprintf("\t\tlisten 127.0.0.1:%d ssl;\n", tlsPort)
	}
	if ls.H2TLS != 0 {
		listens += fmt.Sprintf("\t\tlisten 127.0.0.1:%d ssl http2;\n", ls.H2TLS)
	}
	if ls.H2C != 0 {
		listens += fmt.Sprintf("\t\tlisten 127.0.0.1:%d http2;\n", ls.H2C)
	}
	fmt.Fprintf(&s, `	server {
		listen 127.0.0.1:%d default_server backlog=4096;
%s		location / { default_type application/json; return 404 '{"error":{"code":"route_not_found"}}'; }
	}
`, port, strings.ReplaceAll(listens, ";\n", " default_server backlog=4096;\n"))
	for _, site := range sites {
		fmt.Fprintf(&s, "\tserver {\n\t\tlisten 127.0.0.1:%d;\n%s\t\tserver_name %s;\n", port, listens, site.Host)
		for _, l := range site.Locs {
			fmt.Fprintf(&s, "\t\tlocation %s {\n", l.Path)
			if l.WS {
				// The WebSocket proxy setup of nginx's docs; idle tunnels stay open for the run.
				s.WriteString("\t\t\tproxy_pass http://bench_ws;\n\t\t\tproxy_http_version 1.1;\n" +
					"\t\t\tproxy_set_header Upgrade $http_upgrade;\n\t\t\tproxy_set_header Connection \"upgrade\";\n" +
					"\t\t\tproxy_read_timeout 1h;\n\t\t\tproxy_send_timeout 1h;\n\t\t}\n")
				continue
			}
			if l.GRPC {
				s.WriteString("\t\t\tgrpc_pass grpc://bench_grpc;\n")
				if b.NginxForward {
					s.WriteString(strings.ReplaceAll(nginxForwardConf, "proxy_set_header", "grpc_set_header"))
				}
				s.WriteString("\t\t}\n")
				continue
			}
			if l.Key != "" {
				fmt.Fprintf(&s, "\t\t\tif ($http_x_api_key != %q) { return 401; }\n", l.Key)
			}
			if l.Authz != "" {
				fmt.Fprintf(&s, "\t\t\tif ($http_authorization != %q) { return 401; }\n", l.Authz)
			}
			if l.Limit {
				s.WriteString("\t\t\tlimit_req zone=bench_limit burst=1000000 nodelay;\n")
			}
			up := l.Upstream
			if up == "" {
				up = "bench_upstream"
			}
			fmt.Fprintf(&s, "\t\t\tproxy_pass http://%s;\n\t\t\tproxy_http_version 1.1;\n\t\t\tproxy_set_header Connection \"\";\n", up)
			if b.NginxForward {
				s.WriteString(nginxForwardConf)
			}
			s.WriteString("\t\t}\n")
		}
		s.WriteString("\t}\n")
	}
	s.WriteString("}\n")
	return b.startNginx(ctx, fmt.Sprintf("nginx proxy (%d workers)", workers), dir, s.String(), cpus, port)
}

func (b *Env) startNginx(ctx context.Context, name, dir, conf, cpus string, port int) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	bin := NginxBin()
	if out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: configuration %s rejected: %v\n%s", name, confPath, err, out)
	}
	// SIGTERM if the bench dies: nginx's master then stops its workers (fast shutdown).
	p, err := StartProcSig(name, filepath.Join(dir, "stdout.log"), cpus, os.Environ(), syscall.SIGTERM,
		bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	if err != nil {
		return nil, err
	}
	b.Clean.Add(p.Stop)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	// As long as any process: nginx takes over 10 s to start with S4r's 50,000 locations
	// on a loaded core.
	err = WaitFor(ctx, name+" on "+url, b.ReadyTimeout, 20*time.Millisecond, p, func() error {
		resp, err := b.HTTP.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w\nerror.log:\n%s", err, Tail(filepath.Join(dir, "error.log"), 10))
	}
	return p, nil
}
