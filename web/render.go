package web

import (
	"bytes"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/forms"
	"tollgate/web/shellword"
)

// page is what every template gets.
type page struct {
	Title   string
	User    *tenants.User
	Tenant  *tenantView
	Tenants []*tenants.Membership // the user's tenants, for the switcher
	Nav     string                // the section the page belongs to
	CSRF    string
	Flash   string
	Message string // error pages
	Status  int
	Form    any
	Data    any
	EdgeURL string // http://{slug}.{domain}:{port}
	// EdgePattern is EdgeURL with <slug> for the slug, for pages without a tenant.
	EdgePattern string
	Finance     bool // the user may export the bill: the header links the export page
	Prices      bool // the user may manage the platform's prices (prices.go)
}

var funcs = template.FuncMap{
	"when":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"day":       func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"dayBefore": func(t time.Time) time.Time { return t.Add(-time.Nanosecond) },
	"join":      strings.Join,
	"has": func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	},
	"first": func(list []string) string {
		if len(list) == 0 {
			return "/"
		}
		return strings.TrimPrefix(list[0], "=")
	},
	"num":     func(n int64) string { return forms.GroupDigits(n) },
	"ms":      functionMS,
	"methods": func() []string { return allMethods },
	"roles":   func() []string { return tenants.MemberRoles },
	"modes":   func() []string { return planModes },
	"money":   money,
	"dec":     func(n int) int { return n - 1 },
	"shq":     shellword.Quote, // every command shown for copying quotes its values with it
}

func (c *Console) render(ctx *fiber.Ctx, status int, name string, p page) error {
	t := c.pages[name]
	if t == nil {
		return c.internal(ctx, errors.New("no template "+name))
	}
	switch ctx.Method() {
	case fiber.MethodPost:
		// Error pages are drawn at once: there is no form to keep, and a reload that posts
		// again meets the same refusal.
		if name != "error" {
			if kept, err := c.keep(ctx, status, name, p); kept {
				return err
			}
		}
	case fiber.MethodGet:
		status, name, p = c.replayed(ctx, status, name, p)
		t = c.pages[name]
	}
	p.User = user(ctx)
	p.Tenant = tenantOf(ctx)
	p.CSRF = csrfToken(ctx)
	p.Status = status
	p.Finance = c.mayExport(ctx)
	p.Prices = c.mayPrice(ctx)
	p.EdgePattern = c.edgeURL("<slug>")
	if p.Tenant != nil {
		p.EdgeURL = c.edgeURL(p.Tenant.Slug)
	}
	if p.User != nil && p.Tenants == nil {
		p.Tenants, _ = c.cfg.People.ListMemberships(c.ctx(ctx), p.User.ID)
	}
	if p.Flash == "" {
		p.Flash = flashOf(ctx.Query("done"))
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		ctx.Status(http.StatusInternalServerError)
		ctx.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return ctx.SendString("Something went wrong on our side. Reload the page; if it keeps happening, contact support.")
	}
	ctx.Status(status)
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return ctx.Send(buf.Bytes())
}

// edgeURL is where a tenant's APIs answer: http://{slug}.{EdgeDomain}:{EdgePort}, or under
// EdgePublicURL when the edges sit behind a load balancer.
func (c *Console) edgeURL(slug string) string {
	if u, err := url.Parse(c.cfg.EdgePublicURL); err == nil && u.Host != "" && u.Scheme != "" {
		return u.Scheme + "://" + slug + "." + u.Host
	}
	return "http://" + slug + "." + c.cfg.EdgeDomain + ":" + c.cfg.EdgePort
}

// flashOf turns the ?done= marker of a redirect after a write into a sentence.
func flashOf(done string) string {
	return map[string]string{
		"password-reset":    "Password changed, and every session signed out. Sign in with the new password.",
		"password-changed":  "Password changed. Every other browser signed in to this account is signed out.",
		"verify-sent":       "We mailed you a new verification link.",
		"route-created":     "Route created. The edges apply it within moments.",
		"route-updated":     "Route saved.",
		"route-deleted":     "Route deleted.",
		"consumer-created":  "Consumer created. Give it a key below.",
		"consumer-deleted":  "Consumer deleted, with its keys.",
		"consumer-updated":  "Plan saved. The edges apply its limits within moments.",
		"key-revoked":       "Key revoked.",
		"member-invited":    "Invitation sent. They join when they accept it, signed in with that address; the link works for 7 days.",
		"invite-accepted":   "Invitation accepted: welcome to the tenant.",
		"member-updated":    "Role changed.",
		"member-removed":    "Member removed.",
		"invite-withdrawn":  "Invitation withdrawn.",
		"plan-created":      "Plan created. Consumers on it get its limits within moments.",
		"plan-updated":      "Plan saved. The edges apply it within moments.",
		"plan-deleted":      "Plan deleted.",
		"issuer-created":    "JWT issuer added. Routes with JWT authentication accept its tokens within moments.",
		"issuer-updated":    "JWT issuer saved.",
		"issuer-deleted":    "JWT issuer deleted.",
		"policy-saved":      "Policy saved. The edges apply it within moments.",
		"function-uploaded": "Module uploaded: it is the function's current version. Routes keep the version they run until you save them again.",
		"function-deleted":  "Function deleted, with its versions.",
		"token-revoked":     "Token revoked: calls made with it get 401.",
		"domain-claimed":    "Domain claimed. Publish its TXT record below; the edges serve the name once the record is seen.",
		"domain-verified":   "The TXT record is there: the domain is verified, and the edges serve it within moments.",
		"domain-pending":    "The TXT record was not seen yet: the reason is below. Checks go on automatically.",
		"domain-removed":    "Domain removed. The edges stop serving it within moments.",
		"tenant-renamed":    "Name saved.",
		"tenant-created":    "Tenant created: you are its owner. Switch between your tenants from the menu at the top.",
		"tenant-deleted":    "Tenant deleted, with everything it owned.",
	}[done]
}

func (c *Console) errorPage(ctx *fiber.Ctx, status int, title, msg string) error {
	return c.render(ctx, status, "error", page{Title: title, Message: msg})
}

func (c *Console) notFound(ctx *fiber.Ctx, _ *tenants.User) error {
	return c.errorPage(ctx, http.StatusNotFound, "Not found", "There is nothing here, or you have no access to it.")
}

// internal logs err and shows a page without its details.
func (c *Console) internal(ctx *fiber.Ctx, err error) error {
	var te *tenants.Error
	if errors.As(err, &te) && te.Code != tenants.EInternal {
		status := tenants.Status(te.Code)
		if te.Code == tenants.ENotFound {
			return c.notFound(ctx, user(ctx))
		}
		return c.errorPage(ctx, status, http.StatusText(status), te.Message)
	}
	id := ctx.GetRespHeader(fiber.HeaderXRequestID)
	if c.cfg.Unavailable(err) {
		c.log.Warn("console: the store did not answer", "request_id", id, "path", ctx.Path(), "err", err)
		ctx.Set(fiber.HeaderRetryAfter, "5")
		return c.errorPage(ctx, http.StatusServiceUnavailable, "Temporarily unavailable",
			"The database is not answering right now. Try again in a few seconds.")
	}
	c.log.Error("console: internal error", "request_id", id, "path", ctx.Path(), "err", err)
	return c.errorPage(ctx, http.StatusInternalServerError, "Something went wrong",
		"Something failed on our side. Try again in a moment; if it keeps happening, contact support with request id "+id+".")
}

var indexRE = regexp.MustCompile(`\[(\d+)\]`)

// fieldError puts a *tenants.Error on the form field it names (through alias: the first
// segment of the error's field → the form's field; unlisted fields keep their first
// segment) and reports whether err was one. A message about one line of a list field
// says which line.
func fieldError(err error, into map[string]string, alias map[string]string) bool {
	var te *tenants.Error
	if !errors.As(err, &te) || te.Code == tenants.EInternal {
		return false
	}
	field := te.Field
	if field == "" {
		into["form"] = te.Message
		return true
	}
	head := field
	if i := strings.IndexAny(head, ".["); i >= 0 {
		head = head[:i]
	}
	if a, ok := alias[head]; ok {
		head = a
	}
	msg := te.Message
	if m := indexRE.FindStringSubmatch(field); m != nil {
		n, _ := strconv.Atoi(m[1])
		sub := strings.TrimPrefix(field[strings.Index(field, "]")+1:], ".")
		prefix := "Line " + strconv.Itoa(n+1)
		if sub != "" && sub != "url" {
			prefix += " (" + sub + ")"
		}
		msg = prefix + ": " + msg
	} else if strings.Contains(field, ".") {
		msg = field[strings.Index(field, ".")+1:] + ": " + msg
	}
	if _, dup := into[head]; !dup {
		into[head] = msg
	}
	return true
}

// formSave is one submission of an object's form (create or update).
type formSave struct {
	errs  map[string]string // the form's errors: those it found itself, and any store error
	save  func() error      // validates and stores the object
	field func(error) bool  // puts a validation error on its field; false: not one
	noun  string            // "route", in the message of a version conflict
	audit string            // the audit action, "routes.update" (tenants.AuditAction)
	id    func() string     // the object's id; "" for a new one until saved
	done  string            // where the browser goes next, under the tenant
	then  func() string     // once saved, where to go instead of done; nil or "": done
}

// submit saves the form's object unless the form found errors itself, the save recording
// the change in the audit log, and once saved redirects (sent: the response is written). A version conflict
// or a validation error goes onto the form for the caller to render again; any other
// error is answered as internal (sent).
func (c *Console) submit(ctx *fiber.Ctx, s formSave) (sent bool, err error) {
	if len(s.errs) > 0 {
		return false, nil
	}
	// save stores with the request's context: for its one write, that context carries
	// the audit entry.
	plain := ctx.UserContext()
	ctx.SetUserContext(c.audited(ctx, user(ctx), tenantOf(ctx).ID, s.audit, s.id()))
	err = s.save()
	ctx.SetUserContext(plain)
	switch {
	case err == nil:
		done := s.done
		if s.then != nil && s.then() != "" {
			done = s.then()
		}
		return true, ctx.Redirect(c.tenantURL(ctx, done), http.StatusSeeOther)
	case tenants.ErrorCode(err) == tenants.EVersionConflict:
		s.errs["form"] = "Someone changed this " + s.noun + " since you opened it. Reload the page to see their change, then edit again."
		return false, nil
	case s.field(err):
		return false, nil
	}
	return true, c.internal(ctx, err)
}
