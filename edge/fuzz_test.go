package edge_test

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/edge"
)

// FuzzRequestHeaders sends an arbitrary header block through the edge's request-header
// steps and checks what would go upstream.
func FuzzRequestHeaders(f *testing.F) {
	for _, s := range []string{
		"Connection: keep-alive, X-A\r\nX-A: 1\r\n",
		"Connection: Content-Length, Host, close\r\nContent-Length: 3\r\n",
		"X-Tollgate-X: 1\r\nx-consumer-id: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8\r\n",
		"TE: trailers\r\nUpgrade: h2c\r\nKeep-Alive: 1\r\nProxy-Authorization: x\r\nX-Api-Key: k\r\n",
		"X-Request-Id: a\r\nX-Request-Id: b\r\n",
		"X_Consumer_Id: forged\r\nx_consumer_name: forged\r\n_: x\r\nX-Ok_: y\r\nConnection: X_A\r\nX_A: 1\r\n",
		"X.Consumer.Id: forged\r\nX~Consumer~Id: forged\r\nX!Consumer!Name: forged\r\nx.CONSUMER-id: forged\r\n",
		"X.Forwarded.For: 6.6.6.6\r\nX'Request'Id: r\r\nX#Real#Ip: 1\r\nX.Tollgate.A: 1\r\nX*Api*Key: k\r\nX.Fine: ok\r\n",
	} {
		f.Add(s, true)
	}
	e, err := edge.New(edge.Config{Domain: domain})
	if err != nil {
		f.Fatal(err)
	}
	hop := []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade", "Expect"}
	f.Fuzz(func(t *testing.T, block string, keyed bool) {
		var req fasthttp.Request
		raw := "GET / HTTP/1.1\r\nHost: acme." + domain + "\r\n" + block + "\r\n"
		if err := req.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return
		}
		var named []string
		for k, v := range req.Header.All() {
			if strings.EqualFold(string(k), "Connection") {
				named = append(named, edge.ConnectionTokens(v)...)
			}
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
		consumer := ""
		if keyed {
			consumer = "c-1"
		}
		e.PrepareHeaders(&ctx, consumer, "name", keyed)
		h := &ctx.Request.Header
		for _, k := range hop {
			if v := h.Peek(k); v != nil {
				t.Fatalf("hop-by-hop %s went upstream: %q", k, v)
			}
		}
		for _, k := range named {
			if h.Peek(k) != nil {
				t.Fatalf("%s, named in Connection, went upstream", k)
			}
		}
		xff, ids := 0, 0
		for k, v := range h.All() {
			key := strings.ToLower(string(k))
			switch {
			case strings.Contains(key, "_"):
				t.Fatalf("%s, a name with '_', went upstream", k)
			case strings.HasPrefix(key, "x-tollgate-"):
				t.Fatalf("%s went upstream", k)
			case foldsToEdgeHeader(key) && strings.Trim(key, "abcdefghijklmnopqrstuvwxyz0123456789-") != "":
				t.Fatalf("%s, spelled like a header the edge sets, went upstream", k)
			case key == "x-consumer-id" || key == "x-consumer-name":
				ids++
				if !keyed {
					t.Fatalf("client identity header %s: %q went upstream", k, v)
				}
			case key == "x-forwarded-for":
				xff++
				if string(v) != "192.0.2.1" {
					t.Fatalf("X-Forwarded-For from an untrusted peer: %q", v)
				}
			case key == "x-api-key" && keyed:
				t.Fatalf("consumed key went upstream")
			}
		}
		if xff != 1 || (keyed && ids != 2) {
			t.Fatalf("X-Forwarded-For ×%d, identity ×%d", xff, ids)
		}
		if string(h.Peek("X-Consumer-Id")) != consumer {
			t.Fatalf("X-Consumer-Id %q", h.Peek("X-Consumer-Id"))
		}
	})
}
