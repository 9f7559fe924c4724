package web

import (
	"context"

	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Plans: the tenant's plans for its consumers (rate, burst, monthly quota, concurrency,
// counting mode), and, read-only, the platform plan that caps the whole tenant.

type planForm struct {
	ID, Version string
	Name        string
	Rate, Unit  string // Unit: "rps" or "rpm"
	Burst       string
	Quota       string
	Concurrency string
	Mode        string
	Public      bool   // offered on the developer portal
	Description string // shown beside it there
	Errors      map[string]string
	// Warnings say where the saved plan allows more than the tenant's platform plan.
	Warnings []tenants.Warning
}

var planModes = []string{tenants.ModeApproximate, tenants.ModeExact, tenants.ModeLocal}

func planFormOf(p *tenants.ConsumerPlan) planForm {
	f := planForm{ID: p.ID, Version: strconv.FormatInt(p.Version, 10), Name: p.Name, Unit: "rps", Mode: p.Mode,
		Public: p.Public, Description: p.Description, Errors: map[string]string{}}
	if rl := p.RateLimit; rl != nil {
		switch {
		case rl.RPM > 0:
			f.Rate, f.Unit = strconv.Itoa(rl.RPM), "rpm"
		case rl.RPS > 0:
			f.Rate = strconv.Itoa(rl.RPS)
		}
		if f.Rate != "" {
			f.Burst = strconv.Itoa(rl.Burst)
		}
	}
	if p.Quota != nil && p.Quota.Requests > 0 {
		f.Quota = strconv.FormatInt(p.Quota.Requests, 10)
	}
	if p.Concurrency > 0 {
		f.Concurrency = strconv.Itoa(p.Concurrency)
	}
	return f
}

// number reads an optional whole number of a form field: 0 when empty; a message in
// errs[key] when it is not a number.
func number(v, key, what string, errs map[string]string) int64 {
	v = strings.ReplaceAll(strings.TrimSpace(v), ",", "")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		if _, dup := errs[key]; !dup {
			errs[key] = what + " must be a whole number, 0 or more (or empty for none)"
		}
		return 0
	}
	return n
}

func readPlanForm(ctx *fiber.Ctx, p *tenants.ConsumerPlan) planForm {
	f := planForm{ID: p.ID, Version: ctx.FormValue("version"), Name: strings.TrimSpace(ctx.FormValue("name")),
		Rate: strings.TrimSpace(ctx.FormValue("rate")), Unit: ctx.FormValue("unit"), Burst: strings.TrimSpace(ctx.FormValue("burst")),
		Quota: strings.TrimSpace(ctx.FormValue("quota")), Concurrency: strings.TrimSpace(ctx.FormValue("concurrency")),
		Mode: ctx.FormValue("mode"), Public: ctx.FormValue("public") == "on",
		Description: strings.TrimSpace(ctx.FormValue("description")), Errors: map[string]string{}}
	p.Public, p.Description = f.Public, f.Description
	if f.Unit != "rpm" {
		f.Unit = "rps"
	}
	p.Name, p.Mode = f.Name, f.Mode
	p.RateLimit, p.Quota = nil, nil
	rate := number(f.Rate, "rate_limit", "The rate", f.Errors)
	burst := number(f.Burst, "rate_limit", "The burst", f.Errors)
	if f.Rate != "" || f.Burst != "" {
		rl := &tenants.RateLimit{Burst: int(burst)}
		if f.Unit == "rpm" {
			rl.RPM = int(rate)
		} else {
			rl.RPS = int(rate)
		}
		p.RateLimit = rl
	}
	if q := number(f.Quota, "quota", "The quota", f.Errors); f.Quota != "" {
		p.Quota = &tenants.Quota{Requests: q}
	}
	p.Concurrency = int(number(f.Concurrency, "concurrency", "Concurrency", f.Errors))
	return f
}

type plansData struct {
	Plans    []*tenants.ConsumerPlan
	Platform *tenants.PlatformPlan
	Enabled  bool
	Above    map[string]bool // by plan id: the plan allows more than the platform plan
}

func (c *Console) plansPage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	d := plansData{Platform: tv.Limits, Enabled: c.cfg.Plans != nil}
	if d.Enabled {
		items, _, err := c.cfg.Plans.ListPlans(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit})
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Plans, d.Above = items, map[string]bool{}
		for _, p := range items {
			d.Above[p.ID] = len(tenants.PlanWarnings(p, tv.Limits)) > 0
		}
	}
	return c.render(ctx, http.StatusOK, "plans", page{Title: "Plans & limits", Nav: "plans", Data: d})
}

func (c *Console) plansEnabled(ctx *fiber.Ctx) (bool, error) {
	if c.cfg.Plans == nil {
		return false, c.notFound(ctx, nil)
	}
	return true, nil
}

func (c *Console) planNewPage(ctx *fiber.Ctx) error {
	if ok, err := c.plansEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	f := planForm{Unit: "rps", Errors: map[string]string{}}
	return c.render(ctx, http.StatusOK, "plan", page{Title: "New plan", Nav: "plans", Form: f})
}

func (c *Console) planCreate(ctx *fiber.Ctx) error {
	if ok, err := c.plansEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	p := &tenants.ConsumerPlan{TenantID: tv.ID}
	f := readPlanForm(ctx, p)
	if sent, err := c.submit(ctx, c.planSave(ctx, p, f.Errors, c.cfg.Plans.CreatePlan, "plans.create", "/plans?done=plan-created")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "plan", page{Title: "New plan", Nav: "plans", Form: f})
}

// planSave validates p and stores it with store.
func (c *Console) planSave(ctx *fiber.Ctx, p *tenants.ConsumerPlan, errs map[string]string, store func(context.Context, *tenants.ConsumerPlan) error, audit, done string) formSave {
	return formSave{
		errs: errs, noun: "plan", audit: audit, done: done,
		save: func() error {
			if err := p.Validate(); err != nil {
				return err
			}
			return store(c.ctx(ctx), p)
		},
		field: func(err error) bool { return fieldError(err, errs, nil) },
		id:    func() string { return p.ID },
		// A plan above the platform plan is saved, and its page says where.
		then: func() string {
			if len(tenants.PlanWarnings(p, tenantOf(ctx).Limits)) > 0 {
				return "/plans/" + p.ID + "?done=plan-above-platform"
			}
			return ""
		},
	}
}

func (c *Console) planEditPage(ctx *fiber.Ctx) error {
	if ok, err := c.plansEnabled(ctx); !ok {
		return err
	}
	p, err := c.cfg.Plans.FindPlan(c.ctx(ctx), tenantOf(ctx).ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	prices, err := c.planPrices(ctx, p.Name, newPriceForm(c.thisMonth().String()))
	if err != nil {
		return c.internal(ctx, err)
	}
	f := planFormOf(p)
	f.Warnings = tenants.PlanWarnings(p, tenantOf(ctx).Limits)
	flash := priceFlash(ctx.Query("done"))
	if ctx.Query("done") == "plan-above-platform" {
		flash = "Plan saved."
	}
	return c.render(ctx, http.StatusOK, "plan", page{Title: "Plan " + p.Name, Nav: "plans", Form: f, Data: prices, Flash: flash})
}

func (c *Console) planUpdate(ctx *fiber.Ctx) error {
	if ok, err := c.plansEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	p, err := c.cfg.Plans.FindPlan(c.ctx(ctx), tv.ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	f := readPlanForm(ctx, p)
	if v, err := strconv.ParseInt(f.Version, 10, 64); err == nil {
		p.Version = v
	}
	if sent, err := c.submit(ctx, c.planSave(ctx, p, f.Errors, c.cfg.Plans.UpdatePlan, "plans.update", "/plans?done=plan-updated")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "plan", page{Title: "Plan " + f.Name, Nav: "plans", Form: f})
}

func (c *Console) planDelete(ctx *fiber.Ctx) error {
	if ok, err := c.plansEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	if err := c.cfg.Plans.DeletePlan(c.audited(ctx, user(ctx), tv.ID, "plans.delete", ctx.Params("id")), tv.ID, ctx.Params("id")); err != nil {
		if tenants.ErrorCode(err) == tenants.EConflict {
			return c.errorPage(ctx, http.StatusConflict, "Plan in use",
				"Consumers are on this plan. Move them to another plan (or none), then delete it.")
		}
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/plans?done=plan-deleted"), http.StatusSeeOther)
}
