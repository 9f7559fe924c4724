package portal_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web/portal"
)

// TestPortalTryItRelay: the try-it form's calls, made by the portal, reach the tenant's
// edge address only (here a server standing in for the edge on the loopback address a
// localhost edge domain names), with the key in the header the route reads and nothing
// else of the browser's; the form's mistakes are shown at their fields and send nothing;
// a redirect is shown, not followed; a long answer is cut; the calls are throttled.
func TestPortalTryItRelay(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*http.Request
	var bodies []string
	edge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, string(b))
		mu.Unlock()
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://elsewhere.example/", http.StatusFound)
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(strings.Repeat("x", 100<<10)))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"host":"` + r.Host + `"}`))
		}
	}))
	defer edge.Close()
	_, port, _ := net.SplitHostPort(edge.Listener.Addr().String())
	last := func() (*http.Request, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return nil, ""
		}
		return got[len(got)-1], bodies[len(bodies)-1]
	}
	calls := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }

	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	app := fiber.New(fiber.Config{Immutable: true})
	portal.New(portal.Config{Tenants: db, Consumers: db, Plans: db, Routes: db, Portals: db, Throttle: db,
		Mailer: mail.Mailer(t), PublicURL: "http://api.test", HostRefresh: time.Hour, EdgeDomain: "localhost", EdgePort: port}).Mount(app)
	e := &env{t: t, db: db, app: app, mail: mail}
	a := e.tenant("acme", true)
	for _, r := range []*tenants.Route{
		{Name: "pets", Paths: []string{"=/pets/{id}"}, Methods: []string{"GET"}, Auth: tenants.AuthKey},
		{Name: "echo", Paths: []string{"=/echo"}, Methods: []string{"POST"}, Auth: tenants.AuthNone},
		{Name: "redirect", Paths: []string{"=/redirect"}, Methods: []string{"GET"}},
		{Name: "big", Paths: []string{"=/big"}, Methods: []string{"GET"}},
	} {
		r.TenantID, r.Upstream = a.ID, tenants.Upstream{Targets: []tenants.Target{{URL: "https://up.example.com"}}}
		if err := db.CreateRoute(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	c := e.client("api.test")
	docs := c.do("GET", "/portal/acme/", nil)
	ops := map[string]string{}
	for _, m := range regexp.MustCompile(`/portal/acme/operations/([0-9a-f]{12})"><span class="method method-\w+">(\w+)</span> <code>([^<]+)</code>`).FindAllStringSubmatch(docs.body, -1) {
		ops[m[2]+" "+m[3]] = "/portal/acme/operations/" + m[1]
	}
	if len(ops) != 4 {
		t.Fatalf("operations on the docs page: %v\n%s", ops, docs.body)
	}
	try := func(op string, form neturl.Values) answer {
		t.Helper()
		return c.post(ops[op], ops[op], form)
	}

	// The key goes in X-API-Key, the path parameter into the path; no cookie of the
	// portal's goes along.
	try("GET /pets/{id}", neturl.Values{"key": {"tg_secret"}, "param-0": {"7 x"}}).want(t, 200, `data-testid="answer-status">200`, "&#34;host&#34;: &#34;acme.localhost:"+port)
	r, _ := last()
	if r == nil || r.URL.Path != "/pets/7 x" || r.Header.Get("X-API-Key") != "tg_secret" || r.Header.Get("Cookie") != "" || r.Host != "acme.localhost:"+port {
		t.Fatalf("the edge got %+v", r)
	}
	// Mistakes are shown at their fields and nothing is sent.
	n := calls()
	try("GET /pets/{id}", neturl.Values{"key": {"tg_secret"}}).want(t, 422, `id="param-0-error"`, "is required")
	try("POST /echo", neturl.Values{"body": {"{not json"}}).want(t, 422, `id="body-error"`, "is not valid JSON")
	try("POST /echo", neturl.Values{"body": {strings.Repeat(" ", 70<<10)}}).want(t, 422, `id="body-error"`, "at most")
	if calls() != n {
		t.Errorf("forms with mistakes sent %d calls", calls()-n)
	}
	// An open route gets no key, even one pasted; the body goes as JSON.
	try("POST /echo", neturl.Values{"key": {"tg_secret"}, "body": {`{"a":1}`}}).want(t, 200, `data-testid="answer-status">200`)
	r, body := last()
	if r.Header.Get("X-API-Key") != "" || r.Header.Get("Authorization") != "" || r.Header.Get("Content-Type") != "application/json" || body != `{"a":1}` {
		t.Errorf("the open route got headers %v and body %q", r.Header, body)
	}
	// A redirect is shown, not followed; a long answer is cut.
	try("GET /redirect", neturl.Values{}).want(t, 200, `data-testid="answer-status">302`, "http://elsewhere.example/")
	try("GET /big", neturl.Values{}).want(t, 200, "Only the first 64 KiB are shown")
	// The throttle: 30 calls a minute from one address.
	var last429 answer
	for range 30 {
		if last429 = try("GET /big", neturl.Values{}); last429.status == http.StatusTooManyRequests {
			break
		}
	}
	last429.want(t, 429, "Too many calls from your address")
}
