package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Prices: the platform plans' price versions on /console/finance/prices (for the
// platform roles the policy allows rbac.BillingPrices), and a consumer plan's versions on
// its plan page. A version applies from its month until the plan's next one; only a
// future version may be deleted, since a month begun is billed as it started.

// priceForm is the form of a new version; amounts are typed in the currency's major unit
// ("19.99" dollars), as people read prices, and stored in minor units.
type priceForm struct {
	Plan, EffectiveFrom, Currency           string
	MonthlyFee, IncludedRequests, UnitPrice string
	UnitRequests                            string
	// Function time: the allowance and unit in ms, the price in the currency.
	IncludedFunctionMS, FunctionUnitPrice, FunctionUnitMS string
	PerConsumer                                           bool
	Errors                                                map[string]string
}

// priceRow is a version as the pages list it.
type priceRow struct {
	billing.Price
	State string // "in effect", "scheduled" or "superseded"
}

type pricesData struct {
	Enabled  bool
	CanEdit  bool
	Month    string   // the current month: the earliest a new version may take effect
	Plans    []string // the plans a version may be for (platform page)
	Versions []priceRow
	Form     priceForm
}

// mayPrice reports whether the signed-in user may manage the platform's prices.
func (c *Console) mayPrice(ctx *fiber.Ctx) bool {
	u := user(ctx)
	return u != nil && c.cfg.Roles.Allow(u.PlatformRole, rbac.PlatformDomain, rbac.BillingPrices)
}

func (c *Console) thisMonth() billing.Period { return billing.PeriodOf(c.cfg.Now()) }

func newPriceForm(month string) priceForm {
	return priceForm{EffectiveFrom: month, Currency: "usd", UnitRequests: "1000", FunctionUnitMS: "1000", Errors: map[string]string{}}
}

// readPriceForm reads the form into a price of tenantID's scope; the form's own errors
// (numbers that are not) are in the returned form.
func readPriceForm(ctx *fiber.Ctx, tenantID, plan string) (priceForm, *billing.Price) {
	v := func(k string) string { return strings.TrimSpace(ctx.FormValue(k)) }
	f := priceForm{Plan: plan, EffectiveFrom: v("effective_from"), Currency: strings.ToLower(v("currency")),
		MonthlyFee: v("monthly_fee"), IncludedRequests: v("included_requests"), UnitPrice: v("unit_price"),
		UnitRequests: v("unit_requests"), PerConsumer: ctx.FormValue("per_consumer") == "on", Errors: map[string]string{},
		IncludedFunctionMS: v("included_function_ms"), FunctionUnitPrice: v("function_unit_price"), FunctionUnitMS: v("function_unit_ms")}
	if f.Plan == "" {
		f.Plan = v("plan")
	}
	p := &billing.Price{TenantID: tenantID, Plan: f.Plan, EffectiveFrom: f.EffectiveFrom, Currency: f.Currency,
		MonthlyFee:         amount(f.MonthlyFee, f.Currency, "monthly_fee", "The monthly fee", f.Errors),
		IncludedRequests:   number(f.IncludedRequests, "included_requests", "Included requests", f.Errors),
		UnitPrice:          amount(f.UnitPrice, f.Currency, "unit_price", "The unit price", f.Errors),
		UnitRequests:       number(f.UnitRequests, "unit_requests", "The unit", f.Errors),
		PerConsumer:        f.PerConsumer && tenantID == "",
		IncludedFunctionMS: number(f.IncludedFunctionMS, "included_function_ms", "Included function time", f.Errors),
		FunctionUnitPrice:  amount(f.FunctionUnitPrice, f.Currency, "function_unit_price", "The function time price", f.Errors),
		FunctionUnitMS:     number(f.FunctionUnitMS, "function_unit_ms", "The function time unit", f.Errors)}
	return f, p
}

// amount reads a price typed in the currency's major unit ("1,234.5", "0.05"; whole
// numbers only for a currency without minor units) as minor units.
func amount(v, currency, key, what string, errs map[string]string) int64 {
	v = strings.ReplaceAll(strings.TrimSpace(v), ",", "")
	if v == "" {
		return 0
	}
	digits := 2
	if zeroDecimal[strings.ToUpper(currency)] {
		digits = 0
	}
	whole, frac, _ := strings.Cut(v, ".")
	if whole == "" {
		whole = "0"
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	ok := err == nil && n >= 0 && n <= 1e13 && len(frac) <= digits && !strings.HasPrefix(whole, "+")
	for i := 0; ok && i < digits; i++ {
		n *= 10
	}
	if ok && frac != "" {
		f, err := strconv.ParseUint(frac+strings.Repeat("0", digits-len(frac)), 10, 64)
		ok = err == nil && !strings.HasPrefix(frac, "+")
		n += int64(f)
	}
	if !ok {
		if _, dup := errs[key]; !dup {
			if digits == 0 {
				errs[key] = what + " must be a whole amount, 0 or more"
			} else {
				errs[key] = what + " must be an amount like 19.99, 0 or more"
			}
		}
		return 0
	}
	return n
}

// priceRows lists versions (of one plan, or every plan) with their state this month.
func priceRows(versions []billing.Price, plan string, now billing.Period) []priceRow {
	inEffect := map[string]string{} // plan → the month of its version in effect
	for _, v := range versions {
		if m, _ := billing.ParsePeriod(v.EffectiveFrom); !now.Before(m) && v.EffectiveFrom > inEffect[v.Plan] {
			inEffect[v.Plan] = v.EffectiveFrom
		}
	}
	var out []priceRow
	for _, v := range versions {
		if plan != "" && v.Plan != plan {
			continue
		}
		state := "superseded"
		switch {
		case v.EffectiveFrom == inEffect[v.Plan]:
			state = "in effect"
		case v.EffectiveFrom > now.String():
			state = "scheduled"
		}
		out = append(out, priceRow{Price: v, State: state})
	}
	return out
}

// pricesAudited is the context of a price change's write, recording u's action in the
// audit log (the platform's prices under the platform's own entry, tenantID "").
func (c *Console) pricesAudited(ctx *fiber.Ctx, tenantID, verb, plan, month string) context.Context {
	return tenants.WithAudit(c.ctx(ctx), tenants.Audit{TenantID: tenantID, Actor: user(ctx).Email,
		Action: tenants.AuditAction("prices", verb), Object: plan + "/" + month})
}

// savePrice stores p, putting a refusal on the form's fields: false when it did not.
func (c *Console) savePrice(ctx *fiber.Ctx, f priceForm, p *billing.Price) (bool, error) {
	if len(f.Errors) > 0 {
		return false, nil
	}
	err := c.cfg.Prices.SetPrice(c.pricesAudited(ctx, p.TenantID, tenants.AuditUpdate, p.Plan, p.EffectiveFrom), p)
	if err == nil {
		return true, nil
	}
	if fieldError(err, f.Errors, nil) {
		return false, nil
	}
	return false, err
}

func (c *Console) pricesPageData(ctx *fiber.Ctx, f priceForm) (pricesData, error) {
	now := c.thisMonth()
	d := pricesData{Enabled: c.cfg.Prices != nil, CanEdit: true, Month: now.String(), Form: f}
	if !d.Enabled {
		return d, nil
	}
	versions, err := c.cfg.Prices.ListPrices(c.ctx(ctx), "")
	if err != nil {
		return d, err
	}
	d.Versions = priceRows(versions, "", now)
	if pp, ok := c.cfg.Tenants.(tenants.PlatformPlanService); ok {
		plans, err := pp.ListPlatformPlans(c.ctx(ctx))
		if err != nil {
			return d, err
		}
		for _, p := range plans {
			d.Plans = append(d.Plans, p.Name)
		}
	}
	return d, nil
}

func (c *Console) pricesPage(ctx *fiber.Ctx) error {
	if user(ctx) == nil {
		return ctx.Redirect(loginFor(ctx), http.StatusSeeOther)
	}
	if !c.mayPrice(ctx) {
		return c.notFound(ctx, user(ctx))
	}
	d, err := c.pricesPageData(ctx, newPriceForm(c.thisMonth().String()))
	if err != nil {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusOK, "prices", page{Title: "Prices", Nav: "finance", Data: d, Flash: priceFlash(ctx.Query("done"))})
}

func (c *Console) priceCreate(ctx *fiber.Ctx) error {
	if !c.mayPrice(ctx) || c.cfg.Prices == nil {
		return c.notFound(ctx, user(ctx))
	}
	f, p := readPriceForm(ctx, "", "")
	saved, err := c.savePrice(ctx, f, p)
	if err != nil {
		return c.internal(ctx, err)
	}
	if saved {
		return ctx.Redirect(Prefix+"/finance/prices?done=price-saved", http.StatusSeeOther)
	}
	d, err := c.pricesPageData(ctx, f)
	if err != nil {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "prices", page{Title: "Prices", Nav: "finance", Data: d})
}

func (c *Console) priceDelete(ctx *fiber.Ctx) error {
	if !c.mayPrice(ctx) || c.cfg.Prices == nil {
		return c.notFound(ctx, user(ctx))
	}
	back := Prefix + "/finance/prices"
	backTo(ctx, back)
	if err := c.deletePrice(ctx, ""); err != nil {
		return err
	}
	return ctx.Redirect(back+"?done=price-deleted", http.StatusSeeOther)
}

// deletePrice deletes the version the form names (plan, effective_from) from tenantID's
// scope; a refusal is answered with an error page.
func (c *Console) deletePrice(ctx *fiber.Ctx, tenantID string) error {
	plan, month := ctx.FormValue("plan"), ctx.FormValue("effective_from")
	from, err := billing.ParsePeriod(month)
	if err == nil {
		err = c.cfg.Prices.DeletePrice(c.pricesAudited(ctx, tenantID, tenants.AuditDelete, plan, month), tenantID, plan, from)
	}
	switch tenants.ErrorCode(err) {
	case "":
		return nil
	case tenants.EValidation, tenants.EInvalidRequest:
		return c.errorPage(ctx, http.StatusUnprocessableEntity, "Price in effect",
			"Only a version of a later month can be deleted: a month begun is billed as it started. Add a new version to change the price.")
	}
	return c.internal(ctx, err)
}

// planPrices is the price section of a consumer plan's page.
func (c *Console) planPrices(ctx *fiber.Ctx, plan string, f priceForm) (pricesData, error) {
	tv := tenantOf(ctx)
	now := c.thisMonth()
	d := pricesData{Enabled: c.cfg.Prices != nil, CanEdit: c.cfg.Roles.Allow(tv.Role, tv.ID, rbac.TenantAdmin), Month: now.String(), Form: f}
	if !d.Enabled || plan == "" {
		return d, nil
	}
	versions, err := c.cfg.Prices.ListPrices(c.ctx(ctx), tv.ID)
	if err != nil {
		return d, err
	}
	d.Versions = priceRows(versions, plan, now)
	return d, nil
}

// planPriceCreate adds a version to a consumer plan (POST /t/:slug/plans/:id/prices).
func (c *Console) planPriceCreate(ctx *fiber.Ctx) error {
	p, err := c.pricedPlan(ctx)
	if p == nil {
		return err
	}
	f, price := readPriceForm(ctx, p.TenantID, p.Name)
	saved, err := c.savePrice(ctx, f, price)
	if err != nil {
		return c.internal(ctx, err)
	}
	if saved {
		return ctx.Redirect(c.tenantURL(ctx, "/plans/"+url.PathEscape(p.ID)+"?done=price-saved"), http.StatusSeeOther)
	}
	d, err := c.planPrices(ctx, p.Name, f)
	if err != nil {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "plan", page{Title: "Plan " + p.Name, Nav: "plans", Form: planFormOf(p), Data: d})
}

// planPriceDelete deletes a consumer plan's future version.
func (c *Console) planPriceDelete(ctx *fiber.Ctx) error {
	p, err := c.pricedPlan(ctx)
	if p == nil {
		return err
	}
	if err := c.deletePrice(ctx, p.TenantID); err != nil {
		return err
	}
	return ctx.Redirect(c.tenantURL(ctx, "/plans/"+url.PathEscape(p.ID)+"?done=price-deleted"), http.StatusSeeOther)
}

// pricedPlan is the plan of a price POST, once the caller may change its prices; nil
// when the response is written (with the error to return).
func (c *Console) pricedPlan(ctx *fiber.Ctx) (*tenants.ConsumerPlan, error) {
	if c.cfg.Plans == nil || c.cfg.Prices == nil {
		return nil, c.notFound(ctx, nil)
	}
	backTo(ctx, c.tenantURL(ctx, "/plans/"+url.PathEscape(ctx.Params("id"))))
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return nil, err
	}
	p, err := c.cfg.Plans.FindPlan(c.ctx(ctx), tenantOf(ctx).ID, ctx.Params("id"))
	if err != nil {
		return nil, c.internal(ctx, err)
	}
	return p, nil
}

// priceFlash is the sentence of a price page's ?done= marker.
func priceFlash(done string) string {
	return map[string]string{
		"price-saved":   "Price saved. It applies from its month on, until the plan's next version.",
		"price-deleted": "Scheduled price deleted.",
	}[done]
}
