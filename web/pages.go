package web

import (
	"context"
	"errors"

	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// ---- routes

// routeForm is a route as the form shows it: lists as lines of text.
type routeForm struct {
	ID, Version           string
	Name, Paths, Upstream string
	Methods               []string
	Auth                  string
	Balance               string
	RPS, Burst            string
	StripPrefix           bool
	// Canary is the canary's targets as Upstream's lines, CanaryWeight its percentage;
	// no lines: no canary.
	Canary, CanaryWeight string
	// AuthzURL is the external authorizer's URL, with auth external.
	AuthzURL string
	// Functions are the route's functions as lines: name[@sha256] [config].
	Functions string
	Errors    map[string]string
}

var allMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func formOf(r *tenants.Route) routeForm {
	f := routeForm{ID: r.ID, Version: strconv.FormatInt(r.Version, 10), Name: r.Name, Paths: strings.Join(r.Paths, "\n"),
		Methods: r.Methods, Auth: r.Auth, Balance: r.Upstream.Balance, StripPrefix: r.StripPrefix, Errors: map[string]string{}}
	f.Upstream = targetLines(r.Upstream.Targets)
	if c := r.Canary; c != nil {
		f.Canary, f.CanaryWeight = targetLines(c.Upstream.Targets), strconv.Itoa(c.Weight)
	}
	if r.RateLimit != nil && r.RateLimit.RPS > 0 {
		f.RPS, f.Burst = strconv.Itoa(r.RateLimit.RPS), strconv.Itoa(r.RateLimit.Burst)
	}
	if r.ExternalAuth != nil {
		f.AuthzURL = r.ExternalAuth.URL
	}
	f.Functions = functionLines(r.Functions)
	return f
}

// functionLines shows a route's functions as the form's lines: the name, @ and the
// version it runs, then its configuration (the rest of the line).
func functionLines(fs []tenants.FunctionRef) string {
	var out []string
	for _, fn := range fs {
		line := fn.Name
		// A ref without a name (refused by validation, shown again to be fixed) keeps
		// its "@", so its configuration does not read back as a name.
		if fn.SHA256 != "" || fn.Name == "" {
			line += "@" + fn.SHA256
		}
		if fn.Config != "" {
			line += " " + fn.Config
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// readFunctions reads functionLines' form back. A line without @sha256 runs the
// function's current version once saved.
func readFunctions(text string) []tenants.FunctionRef {
	var fs []tenants.FunctionRef
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		head, config, _ := strings.Cut(l, " ")
		name, sha, _ := strings.Cut(head, "@")
		fs = append(fs, tenants.FunctionRef{Name: name, SHA256: sha, Config: strings.TrimSpace(config)})
	}
	return fs
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(s, ",", "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// readRouteForm reads the form into f and onto r (a new route, or a copy of the stored
// one, so settings the form does not show are kept). Problems the form itself can see
// (a weight or a number that is not one) go into f.Errors.
func readRouteForm(ctx *fiber.Ctx, r *tenants.Route) routeForm {
	f := routeForm{ID: r.ID, Version: ctx.FormValue("version"), Name: strings.TrimSpace(ctx.FormValue("name")), Paths: ctx.FormValue("paths"),
		Upstream: ctx.FormValue("upstream"), Auth: ctx.FormValue("auth"), RPS: strings.TrimSpace(ctx.FormValue("rps")),
		Burst: strings.TrimSpace(ctx.FormValue("burst")), StripPrefix: ctx.FormValue("strip_prefix") == "on", Errors: map[string]string{}}
	for _, m := range allMethods {
		if ctx.FormValue("method_"+m) == "on" {
			f.Methods = append(f.Methods, m)
		}
	}
	r.Name, r.Paths, r.Methods, r.Auth, r.StripPrefix = f.Name, lines(f.Paths), f.Methods, f.Auth, f.StripPrefix
	r.Upstream.Targets = readTargets(f.Upstream, "upstream", f.Errors)
	f.Balance = ctx.FormValue("balance")
	r.Upstream.Balance = f.Balance
	if f.Balance != tenants.BalanceHash {
		r.Upstream.HashOn = "" // only hash has one; a stored one would make the change invalid
	}
	f.Canary, f.CanaryWeight = ctx.FormValue("canary"), strings.TrimSpace(ctx.FormValue("canary_weight"))
	if targets := readTargets(f.Canary, "canary", f.Errors); len(targets) == 0 {
		r.Canary = nil
	} else {
		// A copy: the match and stickiness set through the API are kept.
		c := tenants.Canary{}
		if r.Canary != nil {
			c = *r.Canary
		}
		c.Upstream.Targets = targets
		w, err := strconv.Atoi(f.CanaryWeight)
		if err != nil && f.CanaryWeight != "" {
			f.Errors["canary"] = "The canary's share must be a whole percentage (0–100)"
		}
		c.Weight = w
		r.Canary = &c
	}
	f.AuthzURL = strings.TrimSpace(ctx.FormValue("authz_url"))
	if f.Auth != tenants.AuthExternal {
		r.ExternalAuth = nil
	} else {
		// A copy: headers, timeout and TTLs set through the API are kept.
		a := tenants.ExternalAuth{}
		if r.ExternalAuth != nil {
			a = *r.ExternalAuth
		}
		a.URL = f.AuthzURL
		r.ExternalAuth = &a
	}
	f.Functions = ctx.FormValue("functions")
	r.Functions = readFunctions(f.Functions)
	r.RateLimit = nil
	if f.RPS != "" || f.Burst != "" {
		rps, err1 := strconv.Atoi(f.RPS)
		burst, err2 := strconv.Atoi(f.Burst)
		if err1 != nil || err2 != nil {
			f.Errors["rate_limit"] = "Requests per second and burst must both be whole numbers (or both empty for no limit)"
		}
		r.RateLimit = &tenants.RateLimit{RPS: rps, Burst: burst}
	}
	return f
}

var routeAlias = map[string]string{"upstream": "upstream", "rate_limit": "rate_limit", "canary": "canary", "external_auth": "authz_url", "functions": "functions"}

// targetLines shows targets as the form's lines: a URL, then its weight unless 1.
func targetLines(targets []tenants.Target) string {
	var lines []string
	for _, t := range targets {
		line := t.URL
		if t.Weight != 1 {
			line += " " + strconv.Itoa(t.Weight)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// readTargets reads targetLines' form back; a line it cannot read sets errs[field].
func readTargets(text, field string, errs map[string]string) []tenants.Target {
	var targets []tenants.Target
	for i, l := range strings.Split(text, "\n") {
		parts := strings.Fields(l)
		if len(parts) == 0 {
			continue
		}
		t := tenants.Target{URL: parts[0], Weight: 1}
		if len(parts) > 1 {
			w, err := strconv.Atoi(parts[1])
			if err != nil || len(parts) > 2 {
				errs[field] = "Line " + strconv.Itoa(i+1) + ": write a URL, then optionally a weight (a whole number)"
			}
			t.Weight = w
		}
		targets = append(targets, t)
	}
	return targets
}

// routesPage shows a page of the tenant's routes: in creation order, or with ?q= those
// whose name starts with q, in name order.
func (c *Console) routesPage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	q := strings.TrimSpace(ctx.Query("q"))
	p := tenants.Page{Limit: c.cfg.PageSize, Cursor: ctx.Query("cursor")}
	var (
		items []*tenants.Route
		next  string
		err   error
	)
	keep := url.Values{}
	if q != "" {
		keep.Set("q", q)
		items, next, err = c.cfg.Routes.SearchRoutes(c.ctx(ctx), tv.ID, q, p)
	} else {
		items, next, err = c.cfg.Routes.ListRoutes(c.ctx(ctx), tv.ID, p)
	}
	if tenants.ErrorCode(err) == tenants.EInvalidRequest {
		// A cursor from another filter, or one edited by hand: the list's start.
		start := c.tenantURL(ctx, "/routes")
		if q != "" {
			start += "?" + keep.Encode()
		}
		return ctx.Redirect(start, http.StatusSeeOther)
	}
	if err != nil {
		return c.internal(ctx, err)
	}
	v := listView{Items: items, Query: q}
	v.Next, v.First = pageLinks(ctx, c.tenantURL(ctx, "/routes"), next, keep)
	return c.render(ctx, http.StatusOK, "routes", page{Title: "Routes", Nav: "routes", Data: v})
}

func (c *Console) routeNewPage(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	f := routeForm{Auth: tenants.AuthKey, Paths: "/hello", Errors: map[string]string{}}
	return c.render(ctx, http.StatusOK, "route", page{Title: "New route", Nav: "routes", Form: f})
}

func (c *Console) routeCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	r := &tenants.Route{TenantID: tv.ID}
	f := readRouteForm(ctx, r)
	if sent, err := c.submit(ctx, c.routeSave(ctx, r, f.Errors, c.cfg.Routes.CreateRoute, "routes.create", "/routes?done=route-created")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "route", page{Title: "New route", Nav: "routes", Form: f})
}

// routeSave validates r and stores it with store.
func (c *Console) routeSave(ctx *fiber.Ctx, r *tenants.Route, errs map[string]string, store func(context.Context, *tenants.Route) error, audit, done string) formSave {
	return formSave{
		errs: errs, noun: "route", audit: audit, done: done,
		save: func() error {
			if err := r.Validate(c.cfg.Upstreams); err != nil {
				return err
			}
			return store(c.ctx(ctx), r)
		},
		field: func(err error) bool { return fieldError(err, errs, routeAlias) },
		id:    func() string { return r.ID },
	}
}

func (c *Console) findRoute(ctx *fiber.Ctx) (*tenants.Route, error) {
	return c.cfg.Routes.FindRoute(c.ctx(ctx), tenantOf(ctx).ID, ctx.Params("id"))
}

func (c *Console) routeEditPage(ctx *fiber.Ctx) error {
	r, err := c.findRoute(ctx)
	if err != nil {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusOK, "route", page{Title: "Route " + r.Name, Nav: "routes", Form: formOf(r)})
}

func (c *Console) routeUpdate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	r, err := c.findRoute(ctx)
	if err != nil {
		return c.internal(ctx, err)
	}
	f := readRouteForm(ctx, r)
	if v, err := strconv.ParseInt(f.Version, 10, 64); err == nil {
		r.Version = v
	}
	if sent, err := c.submit(ctx, c.routeSave(ctx, r, f.Errors, c.cfg.Routes.UpdateRoute, "routes.update", "/routes?done=route-updated")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "route", page{Title: "Route " + f.Name, Nav: "routes", Form: f})
}

func (c *Console) routeDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	if err := c.cfg.Routes.DeleteRoute(c.audited(ctx, user(ctx), tv.ID, "routes.delete", ctx.Params("id")), tv.ID, ctx.Params("id")); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/routes?done=route-deleted"), http.StatusSeeOther)
}

// ---- consumers and keys

type consumerForm struct {
	Name   string
	Errors map[string]string
}

func (c *Console) consumersPage(ctx *fiber.Ctx) error {
	return c.consumers(ctx, http.StatusOK, consumerForm{Errors: map[string]string{}})
}

func (c *Console) consumers(ctx *fiber.Ctx, status int, f consumerForm) error {
	items, next, err := c.cfg.Consumers.ListConsumers(c.ctx(ctx), tenantOf(ctx).ID, tenants.Page{Limit: c.cfg.PageSize, Cursor: ctx.Query("cursor")})
	if tenants.ErrorCode(err) == tenants.EInvalidRequest {
		return ctx.Redirect(c.tenantURL(ctx, "/consumers"), http.StatusSeeOther)
	}
	if err != nil {
		return c.internal(ctx, err)
	}
	v := listView{Items: items}
	v.Next, v.First = pageLinks(ctx, c.tenantURL(ctx, "/consumers"), next, nil)
	return c.render(ctx, status, "consumers", page{Title: "Consumers", Nav: "consumers", Data: v, Form: f})
}

func (c *Console) consumerCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	f := consumerForm{Name: strings.TrimSpace(ctx.FormValue("name")), Errors: map[string]string{}}
	cs := &tenants.Consumer{TenantID: tv.ID, Name: f.Name}
	err := c.cfg.Consumers.CreateConsumer(c.audited(ctx, user(ctx), tv.ID, "consumers.create", ""), cs)
	if err == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/consumers/"+cs.ID+"?done=consumer-created"), http.StatusSeeOther)
	}
	if !fieldError(err, f.Errors, nil) {
		return c.internal(ctx, err)
	}
	return c.consumers(ctx, http.StatusUnprocessableEntity, f)
}

type consumerData struct {
	Consumer  *tenants.Consumer
	Keys      []*tenants.Key
	NewKey    string                  // the plaintext of a key just created: shown once
	Route     string                  // a key-auth route's first path, for the example
	Plans     []*tenants.ConsumerPlan // the tenant's plans, to put the consumer on one; nil: plans are off
	PlanError string
	KeyForm   keyForm
	Now       time.Time // for which keys have expired
}

// keyForm is the new key's label and expiry day (YYYY-MM-DD, the key stops working at
// 00:00 UTC that day).
type keyForm struct {
	Label, Expires string
	Errors         map[string]string
}

func (c *Console) consumerPage(ctx *fiber.Ctx) error { return c.consumer(ctx, "") }

func (c *Console) consumer(ctx *fiber.Ctx, newKey string) error {
	status := http.StatusOK
	if newKey != "" {
		status = http.StatusCreated
	}
	return c.consumerView(ctx, status, consumerData{NewKey: newKey})
}

// consumerView renders a consumer's page with what d already holds (a new key, an
// error) and the rest read now.
func (c *Console) consumerView(ctx *fiber.Ctx, status int, d consumerData) error {
	tv := tenantOf(ctx)
	cs, err := c.cfg.Consumers.FindConsumer(c.ctx(ctx), tv.ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	keys, _, err := c.cfg.Consumers.ListKeys(c.ctx(ctx), tv.ID, cs.ID, tenants.Page{Limit: tenants.MaxPageLimit})
	if err != nil {
		return c.internal(ctx, err)
	}
	d.Consumer, d.Keys, d.Route, d.Now = cs, keys, "/hello", c.cfg.Now()
	if d.KeyForm.Errors == nil {
		d.KeyForm.Errors = map[string]string{}
	}
	if c.cfg.Plans != nil {
		if d.Plans, _, err = c.cfg.Plans.ListPlans(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit}); err != nil {
			return c.internal(ctx, err)
		}
	}
	if routes, _, err := c.cfg.Routes.ListRoutes(c.ctx(ctx), tv.ID, tenants.Page{Limit: 50}); err == nil {
		for _, r := range routes {
			if r.Auth == tenants.AuthKey || r.Auth == tenants.AuthKeyOrJWT {
				d.Route = strings.TrimPrefix(r.Paths[0], "=")
				break
			}
		}
	}
	return c.render(ctx, status, "consumer", page{Title: "Consumer " + cs.Name, Nav: "consumers", Data: d})
}

// consumerPlan puts the consumer on one of the tenant's plans, or on none.
func (c *Console) consumerPlan(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	cs, err := c.cfg.Consumers.FindConsumer(c.ctx(ctx), tv.ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	if v, err := strconv.ParseInt(ctx.FormValue("version"), 10, 64); err == nil {
		cs.Version = v
	}
	cs.Plan = ctx.FormValue("plan")
	err = cs.Validate()
	if err == nil {
		err = c.cfg.Consumers.UpdateConsumer(c.audited(ctx, user(ctx), tv.ID, "consumers.update", cs.ID), cs)
	}
	switch code := tenants.ErrorCode(err); {
	case err == nil:
		return ctx.Redirect(c.tenantURL(ctx, "/consumers/"+cs.ID+"?done=consumer-updated"), http.StatusSeeOther)
	case code == tenants.EVersionConflict:
		return c.consumerView(ctx, http.StatusConflict, consumerData{PlanError: "Someone changed this consumer since you opened it. Reload the page, then choose again."})
	case code == tenants.ENotFound || code == tenants.EValidation:
		// The plan was deleted since the page was drawn, or the name was not one.
		return c.consumerView(ctx, http.StatusUnprocessableEntity, consumerData{PlanError: "There is no plan named " + strconv.Quote(cs.Plan) + " any more: choose another."})
	}
	return c.internal(ctx, err)
}

func (c *Console) keyCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Keys); !ok {
		return err
	}
	tv := tenantOf(ctx)
	plain, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: tv.ID, ConsumerID: ctx.Params("id"), Prefix: display, Hash: hash}
	f := keyForm{Label: strings.TrimSpace(ctx.FormValue("label")), Expires: strings.TrimSpace(ctx.FormValue("expires")), Errors: map[string]string{}}
	k.Label = f.Label
	if f.Expires != "" {
		day, err := time.Parse(time.DateOnly, f.Expires)
		if err != nil {
			f.Errors["expires_at"] = "Give the day as YYYY-MM-DD, or leave it empty for a key that does not expire"
		}
		k.ExpiresAt = &day
	}
	err := k.Validate(c.cfg.Now())
	if err == nil && len(f.Errors) == 0 {
		err = c.cfg.Consumers.CreateKey(c.audited(ctx, user(ctx), tv.ID, "keys.create", ""), k)
	}
	if err != nil && !fieldError(err, f.Errors, nil) {
		return c.internal(ctx, err)
	}
	if len(f.Errors) > 0 {
		return c.consumerView(ctx, http.StatusUnprocessableEntity, consumerData{KeyForm: f})
	}
	return c.consumer(ctx, plain)
}

func (c *Console) keyDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Keys); !ok {
		return err
	}
	tv := tenantOf(ctx)
	if err := c.cfg.Consumers.DeleteKey(c.audited(ctx, user(ctx), tv.ID, "keys.delete", ctx.Params("key_id")), tv.ID, ctx.Params("id"), ctx.Params("key_id")); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/consumers/"+ctx.Params("id")+"?done=key-revoked"), http.StatusSeeOther)
}

func (c *Console) consumerDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	if err := c.cfg.Consumers.DeleteConsumer(c.audited(ctx, user(ctx), tv.ID, "consumers.delete", ctx.Params("id")), tv.ID, ctx.Params("id")); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/consumers?done=consumer-deleted"), http.StatusSeeOther)
}

// ---- audit and members

// auditRow is an entry as the page shows it: the object by its name, linked to its page
// while it exists.
type auditRow struct {
	*tenants.AuditEntry
	Name, Link string
	Fields     []auditField  // an update's changed fields
	Objects    []auditObject // an apply's or an import's objects
}

// auditRange is the audit page's optional date range, as typed, with a message for a bad
// bound (the page then shows every entry).
type auditRange struct {
	From, To string // YYYY-MM-DD, or ""
	Errors   map[string]string
	Query    string // the range as a query string, for the next page's link
}

func (c *Console) auditPage(ctx *fiber.Ctx) error {
	r := auditRange{From: ctx.Query("from"), To: ctx.Query("to"), Errors: map[string]string{}}
	q := tenants.AuditQuery{Page: tenants.Page{Limit: c.cfg.PageSize, Cursor: ctx.Query("cursor")}}
	from, to, err := tenants.ParseAuditRange(r.From, r.To)
	var bad *tenants.Error
	if errors.As(err, &bad) {
		r.Errors[bad.Field] = "Give a day as YYYY-MM-DD"
		if bad.Field == "to" && r.To != "" && !strings.Contains(bad.Message, "YYYY") {
			r.Errors["to"] = "The last day must not be before the first"
		}
	} else {
		q.From, q.To = from, to
		v := url.Values{}
		if r.From != "" {
			v.Set("from", r.From)
		}
		if r.To != "" {
			v.Set("to", r.To)
		}
		r.Query = v.Encode()
	}
	items, next, err := c.cfg.Audit.ListAudit(c.ctx(ctx), tenantOf(ctx).ID, q)
	if err != nil {
		return c.internal(ctx, err)
	}
	names, err := c.objectNames(ctx, items)
	if err != nil {
		return c.internal(ctx, err)
	}
	rows := make([]auditRow, len(items))
	for i, a := range items {
		rows[i] = auditRow{AuditEntry: a}
		if a.Changes != nil {
			rows[i].Fields, rows[i].Objects = auditFields(a.Changes.Fields), auditObjects(a.Changes)
		}
		kind, _, _ := strings.Cut(a.Action, ".")
		if o, ok := names[kind+"/"+a.Object]; ok {
			rows[i].Name, rows[i].Link = o[0], o[1]
		}
	}
	keep, _ := url.ParseQuery(r.Query)
	v := listView{Items: rows}
	v.Next, v.First = pageLinks(ctx, c.tenantURL(ctx, "/audit"), next, keep)
	return c.render(ctx, http.StatusOK, "audit", page{Title: "Audit log", Nav: "audit", Data: map[string]any{"Items": rows, "Range": r, "Pages": v}})
}

// objectNames maps "kind/id" (the audit action's kind) to the name and page of the
// entries' routes and consumers, and of the tenant's plans and members, that still exist.
// Routes and consumers are looked up by the page's ids: a tenant may have 50,000.
func (c *Console) objectNames(ctx *fiber.Ctx, entries []*tenants.AuditEntry) (map[string][2]string, error) {
	tv, all := tenantOf(ctx), tenants.Page{Limit: tenants.MaxPageLimit}
	out := map[string][2]string{}
	var routeIDs, consumerIDs []string
	for _, a := range entries {
		switch kind, _, _ := strings.Cut(a.Action, "."); kind {
		case "routes":
			routeIDs = append(routeIDs, a.Object)
		case "consumers":
			consumerIDs = append(consumerIDs, a.Object)
		}
	}
	routes, err := c.cfg.Routes.RouteNames(c.ctx(ctx), tv.ID, routeIDs)
	if err != nil {
		return nil, err
	}
	for id, name := range routes {
		out["routes/"+id] = [2]string{name, c.tenantURL(ctx, "/routes/"+id)}
	}
	consumers, err := c.cfg.Consumers.ConsumerNames(c.ctx(ctx), tv.ID, consumerIDs)
	if err != nil {
		return nil, err
	}
	for id, name := range consumers {
		out["consumers/"+id] = [2]string{name, c.tenantURL(ctx, "/consumers/"+id)}
	}
	if c.cfg.Plans != nil {
		plans, _, err := c.cfg.Plans.ListPlans(c.ctx(ctx), tv.ID, all)
		if err != nil {
			return nil, err
		}
		for _, p := range plans {
			out["plans/"+p.ID] = [2]string{p.Name, c.tenantURL(ctx, "/plans/"+p.ID)}
		}
	}
	members, err := c.cfg.People.ListMembers(c.ctx(ctx), tv.ID)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		out["members/"+m.UserID] = [2]string{m.Email, c.tenantURL(ctx, "/members")}
	}
	return out, nil
}

type memberForm struct {
	Email, Role string
	Errors      map[string]string
}

type membersData struct {
	Members []*tenants.Membership
	Invites []*tenants.Invite
	Owners  int
	Me      string    // the signed-in user's id
	Now     time.Time // for which invites have expired
}

func (c *Console) membersPage(ctx *fiber.Ctx) error {
	return c.members(ctx, http.StatusOK, memberForm{Role: tenants.RoleViewer, Errors: map[string]string{}})
}

func (c *Console) members(ctx *fiber.Ctx, status int, f memberForm) error {
	tv := tenantOf(ctx)
	items, err := c.cfg.People.ListMembers(c.ctx(ctx), tv.ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	// Pending invitations are the tenant admins' business, as on the API.
	var invites []*tenants.Invite
	if tv.CanAdmin {
		if invites, err = c.cfg.People.ListInvites(c.ctx(ctx), tv.ID); err != nil {
			return c.internal(ctx, err)
		}
	}
	d := membersData{Members: items, Invites: invites, Me: user(ctx).ID, Now: c.cfg.Now()}
	for _, m := range items {
		if m.Role == tenants.RoleOwner {
			d.Owners++
		}
	}
	return c.render(ctx, status, "members", page{Title: "Members", Nav: "members", Data: d, Form: f})
}

// inviteCreate mails an address a link to join the tenant. What it says afterwards is the
// same whether or not the address has an account.
func (c *Console) inviteCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	tv := tenantOf(ctx)
	f := memberForm{Email: strings.TrimSpace(ctx.FormValue("email")), Role: ctx.FormValue("role"), Errors: map[string]string{}}
	if f.Role == tenants.RoleOwner && tv.Role != tenants.RoleOwner {
		f.Errors["role"] = "Only an owner may invite an owner"
		return c.members(ctx, http.StatusForbidden, f)
	}
	inv := &tenants.Invite{TenantID: tv.ID, Email: f.Email, Role: f.Role, InvitedBy: user(ctx).Email}
	token, err := c.cfg.People.Invite(c.audited(ctx, user(ctx), tv.ID, "invites.create", ""), inv)
	if err != nil {
		if !fieldError(err, f.Errors, nil) {
			return c.internal(ctx, err)
		}
		status := http.StatusUnprocessableEntity
		switch tenants.ErrorCode(err) {
		case tenants.EConflict:
			status = http.StatusConflict
		case tenants.ERateLimited:
			status = http.StatusTooManyRequests
		}
		return c.members(ctx, status, f)
	}
	if err := c.mailInvite(ctx, inv, tv.Tenant, token); err != nil {
		f.Errors["form"] = "The invitation mail could not be sent, so nothing was saved. Try again in a moment."
		return c.members(ctx, http.StatusServiceUnavailable, f)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/members?done=member-invited"), http.StatusSeeOther)
}

// ownerGuard refuses a change to an owner's membership by someone who is not an owner.
func (c *Console) ownerGuard(ctx *fiber.Ctx, userID, newRole string) (bool, error) {
	tv := tenantOf(ctx)
	m, err := c.cfg.People.FindMembership(c.ctx(ctx), tv.ID, userID)
	if err != nil {
		return false, c.internal(ctx, err)
	}
	if tv.Role != tenants.RoleOwner && (m.Role == tenants.RoleOwner || newRole == tenants.RoleOwner) {
		return false, c.errorPage(ctx, http.StatusForbidden, "Not allowed", "Only an owner may make an owner or change an owner's membership.")
	}
	return true, nil
}

func (c *Console) memberRole(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	tv, id, role := tenantOf(ctx), ctx.Params("user_id"), ctx.FormValue("role")
	if ok, err := c.ownerGuard(ctx, id, role); !ok {
		return err
	}
	if _, err := c.cfg.People.SetMemberRole(c.audited(ctx, user(ctx), tv.ID, "members.update", id), tv.ID, id, role); err != nil {
		if tenants.ErrorCode(err) == tenants.EConflict || tenants.ErrorCode(err) == tenants.EValidation {
			f := memberForm{Role: tenants.RoleViewer, Errors: map[string]string{"members": tenants.ErrorMessage(err)}}
			return c.members(ctx, tenants.Status(tenants.ErrorCode(err)), f)
		}
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/members?done=member-updated"), http.StatusSeeOther)
}

func (c *Console) memberRemove(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	tv, id := tenantOf(ctx), ctx.Params("user_id")
	if ok, err := c.ownerGuard(ctx, id, ""); !ok {
		return err
	}
	if err := c.cfg.People.RemoveMember(c.audited(ctx, user(ctx), tv.ID, "members.delete", id), tv.ID, id); err != nil {
		if tenants.ErrorCode(err) == tenants.EConflict {
			f := memberForm{Role: tenants.RoleViewer, Errors: map[string]string{"members": tenants.ErrorMessage(err)}}
			return c.members(ctx, http.StatusConflict, f)
		}
		return c.internal(ctx, err)
	}
	if id == user(ctx).ID {
		return ctx.Redirect(Prefix+"/", http.StatusSeeOther)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/members?done=member-removed"), http.StatusSeeOther)
}

func (c *Console) inviteDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	tv, email := tenantOf(ctx), ctx.FormValue("email")
	if err := c.cfg.People.DeleteInvite(c.audited(ctx, user(ctx), tv.ID, "invites.delete", email), tv.ID, email); err != nil {
		if tenants.ErrorCode(err) == tenants.ENotFound {
			// Already accepted, declined or withdrawn by another admin: nothing to do.
			return ctx.Redirect(c.tenantURL(ctx, "/members?done=invite-withdrawn"), http.StatusSeeOther)
		}
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/members?done=invite-withdrawn"), http.StatusSeeOther)
}
