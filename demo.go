package main

import (
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// startDemoUpstream serves the demo tenant's API: it echoes what the edge forwarded, so a
// new user sees the path, the consumer header and the forwarding headers the edge set.
func startDemoUpstream(ln net.Listener) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		headers := map[string]string{}
		for _, h := range []string{"X-Consumer-Id", "X-Consumer-Name", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id"} {
			if v := r.Header.Get(h); v != "" {
				headers[h] = v
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"message": "hello from the demo upstream",
			"method":  r.Method,
			"path":    r.URL.Path,
			"headers": headers,
		})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }
}
