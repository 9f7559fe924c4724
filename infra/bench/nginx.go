package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// nginxBin is the Debian nginx the bench runs, as upstream and as the proxy to beat.
func nginxBin() string {
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

// startUpstream starts the fast upstream every gateway proxies to: nginx, one worker,
// answering 200 "ok" on every path, keep-alive without a request cap.
func startUpstream(ctx context.Context, b *bench, port int) (*proc, error) {
	dir := filepath.Join(b.dir, "upstream")
	conf := nginxMain(dir, 1) + fmt.Sprintf(`http {
	access_log off;
	keepalive_requests 1000000;
	keepalive_timeout 120s;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	server {
		listen 127.0.0.1:%[2]d default_server backlog=4096;
		location / { default_type text/plain; return 200 "ok"; }
	}
}
`, dir, port)
	return startNginx(ctx, b, "upstream nginx", dir, conf, b.loadCPUs, port)
}

// proxySite is one virtual host of the nginx proxy, mirroring a tenant's Tollgate routes.
type proxySite struct {
	host string
	locs []proxyLoc
}

// proxyLoc is one location of a site: a path prefix, proxied to the upstream.
type proxyLoc struct {
	path  string
	key   string // when set, X-API-Key must equal it (S2's key auth)
	limit bool   // S2's never-triggered rate limit
	authz string // when set, Authorization must equal it (S2j's stand-in for JWT auth)
}

// startProxy starts the nginx proxy under test: workers workers pinned to cpus, an upstream
// block with keepalive 64 and HTTP/1.1 with the Connection header cleared, as the nginx
// docs recommend for upstream keep-alive.
func startProxy(ctx context.Context, b *bench, port, upPort, workers int, cpus string, sites []proxySite) (*proc, error) {
	dir := filepath.Join(b.dir, fmt.Sprintf("proxy-%dw", workers))
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
	server {
		listen 127.0.0.1:%[3]d default_server backlog=4096;
		location / { default_type application/json; return 404 '{"error":{"code":"route_not_found"}}'; }
	}
`, dir, upPort, port)
	for _, site := range sites {
		fmt.Fprintf(&s, "\tserver {\n\t\tlisten 127.0.0.1:%d;\n\t\tserver_name %s;\n", port, site.host)
		for _, l := range site.locs {
			fmt.Fprintf(&s, "\t\tlocation %s {\n", l.path)
			if l.key != "" {
				fmt.Fprintf(&s, "\t\t\tif ($http_x_api_key != %q) { return 401; }\n", l.key)
			}
			if l.authz != "" {
				fmt.Fprintf(&s, "\t\t\tif ($http_authorization != %q) { return 401; }\n", l.authz)
			}
			if l.limit {
				s.WriteString("\t\t\tlimit_req zone=bench_limit burst=1000000 nodelay;\n")
			}
			s.WriteString("\t\t\tproxy_pass http://bench_upstream;\n\t\t\tproxy_http_version 1.1;\n\t\t\tproxy_set_header Connection \"\";\n\t\t}\n")
		}
		s.WriteString("\t}\n")
	}
	s.WriteString("}\n")
	return startNginx(ctx, b, fmt.Sprintf("nginx proxy (%d workers)", workers), dir, s.String(), cpus, port)
}

func startNginx(ctx context.Context, b *bench, name, dir, conf, cpus string, port int) (*proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	bin := nginxBin()
	if out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: configuration %s rejected: %v\n%s", name, confPath, err, out)
	}
	p, err := startProc(name, filepath.Join(dir, "stdout.log"), cpus, os.Environ(),
		bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	if err != nil {
		return nil, err
	}
	b.clean.add(p.stop)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	err = waitFor(ctx, name+" on "+url, 10*time.Second, 20*time.Millisecond, p, func() error {
		resp, err := b.http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("%w\nerror.log:\n%s", err, tail(filepath.Join(dir, "error.log"), 10))
	}
	return p, nil
}
