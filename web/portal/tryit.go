package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/forms"
)

// An operation's page, and its try-it form.
//
// The form is sent to the portal, which makes the call to the tenant's edge itself and
// draws the answer: a relay, not a call from the browser. The portal's pages are on the
// api's origin and the edge is another, so a call from the browser would need the edge
// to answer CORS for every portal origin (custom domains included) on every route of
// every tenant, and the pages would need script, which their CSP forbids. The relay
// instead is bounded on every side: it only ever calls the requesting portal's own
// tenant at the edge's configured address (the URL is built from the settings and the
// tenant's slug, and the dialer refuses any other host, and any address that is
// link-local, multicast or unspecified, and loopback unless the edge's domain is
// localhost); it follows no redirect, sends no cookie, sends the key only in the header
// the route's authentication reads, takes at most tryBodyMax bytes of body, reads at most
// tryAnswerMax bytes of the answer, gives up after tryTimeout, and counts tryRule calls
// per client address and tenant. The key is in the form the browser posts to its own
// portal, in the page drawn back to that browser, and nowhere else: never in a URL, a
// log line or the audit log.

const (
	tryBodyMax   = 64 << 10
	tryAnswerMax = 64 << 10
	tryTimeout   = 10 * time.Second
	tryValueMax  = 2048
)

// tryRule bounds the calls one client address makes through one portal.
var tryRule = tenants.ThrottleRule{Limit: 30, Window: time.Minute}

type opView struct {
	Op      *operation
	EdgeURL string
	Curl    string
	// Credential is the header the key field fills ("" when the route reads none).
	Credential string
	Form       tryForm
	Result     *tryResult
}

type tryForm struct {
	Key    string
	Values []string // by the index of the operation's parameter
	Body   string
	Errors map[string]string
}

type tryResult struct {
	Method, URL string
	Status      int
	StatusText  string
	Headers     [][2]string
	Body        string
	Truncated   bool
	Binary      int // the body's size when it is not text
	Took        string
	Error       string
}

func (p *Portal) operationPage(ctx *fiber.Ctx) error {
	d, o, err := p.findOp(ctx)
	if err != nil || o == nil {
		return err
	}
	f := tryForm{Values: make([]string, len(o.Params)), Body: o.BodyExample, Errors: map[string]string{}}
	for i, pr := range o.Params {
		if pr.Required || pr.In == "path" {
			f.Values[i] = pr.Example
		}
	}
	return p.drawOp(ctx, http.StatusOK, d, o, f, nil)
}

func (p *Portal) findOp(ctx *fiber.Ctx) (*docsView, *operation, error) {
	d, err := p.apiDocs(p.ctx(ctx), viewOf(ctx).Tenant)
	if err != nil {
		return nil, nil, p.internal(ctx, err)
	}
	o := findOperation(ctx.Params("id"), d.Operations, d.routeOps)
	if o == nil {
		return nil, nil, p.notFound(ctx)
	}
	return d, o, nil
}

func (p *Portal) drawOp(ctx *fiber.Ctx, status int, d *docsView, o *operation, f tryForm, res *tryResult) error {
	ov := opView{Op: o, EdgeURL: d.EdgeURL, Form: f, Result: res}
	if o.Route != nil {
		ov.Curl = newExample(o, d.EdgeURL).curl("")
		ov.Credential, _ = credential(o.Route.Auth, f.Key)
		ov.Credential = strings.TrimSuffix(strings.TrimSuffix(ov.Credential, "Bearer "), ": ")
	}
	return p.render(ctx, status, "operation", page{Title: o.Method + " " + o.Path, Nav: "docs", Form: f, Data: ov})
}

// tryOperation is the try-it form's POST: it checks the form, makes the call through the
// relay and draws the answer under the form.
func (p *Portal) tryOperation(ctx *fiber.Ctx) error {
	d, o, err := p.findOp(ctx)
	if err != nil || o == nil {
		return err
	}
	f := tryForm{Key: strings.TrimSpace(ctx.FormValue("key")), Values: make([]string, len(o.Params)), Errors: map[string]string{}}
	if bodyMethod(o.Method) {
		f.Body = ctx.FormValue("body")
	}
	if o.Route == nil {
		f.Errors["form"] = "No route of this API serves this operation yet: the edge would answer 404."
		return p.drawOp(ctx, http.StatusUnprocessableEntity, d, o, f, nil)
	}
	pathValues := map[string]string{}
	query := neturl.Values{}
	header := http.Header{}
	for i, pr := range o.Params {
		v := strings.TrimSpace(ctx.FormValue("param-" + strconv.Itoa(i)))
		f.Values[i] = v
		field := "param-" + strconv.Itoa(i)
		switch {
		case len(v) > tryValueMax:
			f.Errors[field] = "must be at most " + strconv.Itoa(tryValueMax) + " characters"
		case v == "" && pr.Required:
			f.Errors[field] = "is required"
		case v == "":
		case pr.In == "path":
			pathValues[pr.Name] = v
		case pr.In == "query":
			query.Add(pr.Name, v)
		case pr.In == "header":
			if !relayHeader(pr.Name) {
				f.Errors[field] = "is a header the portal does not send"
			} else if strings.ContainsAny(v, "\r\n\x00") {
				f.Errors[field] = "must be on one line"
			} else {
				header.Set(pr.Name, v)
			}
		}
	}
	if len(f.Key) > tryValueMax || strings.ContainsAny(f.Key, "\r\n\x00") {
		f.Errors["key"] = "is not a key"
	}
	var body []byte
	if f.Body != "" {
		switch {
		case len(f.Body) > tryBodyMax:
			f.Errors["body"] = "must be at most " + forms.GroupDigits(tryBodyMax) + " bytes here"
		case strings.Contains(o.BodyMedia, "json") && !json.Valid([]byte(f.Body)):
			f.Errors["body"] = "is not valid JSON"
		default:
			body = []byte(f.Body)
		}
	}
	path := fillPath(o.Path, o.Params, pathValues)
	if len(f.Errors) == 0 {
		if served(routeTable([]*tenants.Route{o.Route}), o.Method, path) == nil {
			f.Errors["form"] = "The route does not serve " + path + ": the edge would refuse it. Check the path parameters."
		}
	}
	if len(f.Errors) > 0 {
		return p.drawOp(ctx, http.StatusUnprocessableEntity, d, o, f, nil)
	}
	v := viewOf(ctx)
	wait, err := p.throttled(ctx, []string{"portal-tryit:" + v.Tenant.ID + ":" + forms.ClientIP(ctx, p.cfg.TrustedProxies)}, []tenants.ThrottleRule{tryRule})
	if err != nil {
		return p.internal(ctx, err)
	}
	if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "calls from your address")
		return p.drawOp(ctx, http.StatusTooManyRequests, d, o, f, nil)
	}
	if h, _ := credential(o.Route.Auth, f.Key); h != "" && f.Key != "" {
		name, prefix, _ := strings.Cut(h, ": ")
		header.Set(name, prefix+f.Key)
	}
	if body != nil {
		header.Set("Content-Type", o.BodyMedia)
	}
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	res := p.relayCall(p.ctx(ctx), v.Tenant.Slug, o.Method, path, header, body)
	return p.drawOp(ctx, http.StatusOK, d, o, f, res)
}

// relayHeader reports whether a header parameter may be sent by the relay: not one that
// frames the message, names the host or a client address, or carries a cookie.
func relayHeader(name string) bool {
	n := http.CanonicalHeaderKey(strings.TrimSpace(name))
	if n == "" || strings.ContainsAny(n, " \t\r\n:") {
		return false
	}
	switch n {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive",
		"Cookie", "Forwarded", "Expect", "Proxy-Authorization", "Proxy-Connection":
		return false
	}
	return !strings.HasPrefix(n, "X-Forwarded-")
}

// edgeTarget is the host (without the slug) and port the relay may dial, and whether
// that host is a localhost name (so loopback addresses are the edge's).
func (p *Portal) edgeTarget() (host, port string, loopback bool) {
	host, port = p.cfg.EdgeDomain, p.cfg.EdgePort
	if u, err := neturl.Parse(p.cfg.EdgePublicURL); err == nil && u.Host != "" && u.Scheme != "" {
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
		}
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host, port, host == "localhost" || strings.HasSuffix(host, ".localhost")
}

var errRelayTarget = errors.New("portal: the relay dials only the tenant's edge")

// dialEdge is the relay's only way out: to {slug}.{edge domain}:{edge port}, at an address
// the rules allow.
func (p *Portal) dialEdge(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	edgeHost, edgePort, loopback := p.edgeTarget()
	host = strings.ToLower(host)
	slug, ok := strings.CutSuffix(host, "."+edgeHost)
	if !ok || port != edgePort || tenants.ValidateSlug(slug) != nil {
		return nil, errRelayTarget
	}
	var ips []netip.Addr
	if loopback {
		// RFC 6761: localhost names are the loopback interface, whatever a resolver says.
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	err = errRelayTarget
	for _, ip := range ips {
		if !relayAddrAllowed(ip.Unmap(), loopback) {
			continue
		}
		var c net.Conn
		if c, err = d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port)); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// relayAddrAllowed: never an unspecified, multicast or link-local address (cloud
// metadata services live at 169.254.169.254), and loopback only for a localhost edge.
func relayAddrAllowed(ip netip.Addr, loopback bool) bool {
	switch {
	case !ip.IsValid(), ip.IsUnspecified(), ip.IsMulticast(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return false
	case ip.IsLoopback():
		return loopback
	}
	return true
}

func newRelayClient(dial func(context.Context, string, string) (net.Conn, error)) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // a proxy from the environment would be another way out
			DialContext:            dial,
			TLSHandshakeTimeout:    5 * time.Second,
			ResponseHeaderTimeout:  tryTimeout,
			MaxResponseHeaderBytes: 64 << 10,
			DisableCompression:     true,
			MaxIdleConns:           4,
			IdleConnTimeout:        30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       tryTimeout,
	}
}

// relayCall makes the call at the tenant's edge and describes its answer, or why there
// was none.
func (p *Portal) relayCall(ctx context.Context, slug, method, pathQuery string, header http.Header, body []byte) *tryResult {
	base := p.edgeURL(slug)
	res := &tryResult{Method: method, URL: base + pathQuery}
	want, err := neturl.Parse(base)
	if err != nil {
		res.Error = "The edge's address is not set up right; tell the API's owner."
		return res
	}
	req, err := http.NewRequestWithContext(ctx, method, base+pathQuery, bytes.NewReader(body))
	if err != nil || req.URL.Host != want.Host || req.URL.Scheme != want.Scheme {
		res.Error = "This call cannot be made: its path is not one the edge takes."
		return res
	}
	req.Header = header
	req.Header.Set("User-Agent", "Tollgate-portal-try-it")
	start := time.Now()
	ans, err := p.relay.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
			res.Error = "The edge did not answer within " + tryTimeout.String() + "."
		default:
			res.Error = "The edge could not be reached."
		}
		p.log.Warn("portal: try-it call failed", "tenant", slug, "method", method, "err", err)
		return res
	}
	defer ans.Body.Close()
	b, err := io.ReadAll(io.LimitReader(ans.Body, tryAnswerMax+1))
	res.Took = time.Since(start).Round(time.Millisecond).String()
	if err != nil {
		res.Error = "The edge's answer was cut off."
	}
	res.Status, res.StatusText = ans.StatusCode, http.StatusText(ans.StatusCode)
	names := make([]string, 0, len(ans.Header))
	for n := range ans.Header {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, v := range ans.Header[n] {
			res.Headers = append(res.Headers, [2]string{n, v})
		}
	}
	if len(b) > tryAnswerMax {
		b, res.Truncated = b[:tryAnswerMax], true
	}
	switch {
	case !utf8.Valid(b) && !res.Truncated:
		res.Binary = len(b)
	case strings.Contains(ans.Header.Get("Content-Type"), "json"):
		var pretty bytes.Buffer
		if json.Indent(&pretty, b, "", "  ") == nil {
			b = pretty.Bytes()
		}
		res.Body = strings.ToValidUTF8(string(b), "\uFFFD")
	default:
		res.Body = strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return res
}
