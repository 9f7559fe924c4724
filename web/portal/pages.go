package portal

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/web/forms"
)

// The signed-in pages: keys, plans and usage, each about the account's one consumer.

type keyForm struct {
	Label, Expires string
	Errors         map[string]string
}

type keysView struct {
	Keys    []*tenants.Key
	New     string // the plaintext of the key just created, shown once
	Example *example
	Curl    string // the example called with the new key
	Full    bool
	Now     time.Time
}

func (p *Portal) keysPage(ctx *fiber.Ctx) error {
	flash, err := p.takeFlash(ctx)
	if err != nil {
		return p.internal(ctx, err)
	}
	return p.renderKeys(ctx, http.StatusOK, keyForm{Errors: map[string]string{}}, flash)
}

func (p *Portal) renderKeys(ctx *fiber.Ctx, status int, f keyForm, plaintext string) error {
	v, a := viewOf(ctx), account(ctx)
	keys, _, err := p.cfg.Consumers.ListKeys(p.ctx(ctx), v.Tenant.ID, a.ConsumerID, tenants.Page{Limit: MaxKeys + 1})
	if err != nil {
		return p.internal(ctx, err)
	}
	kv := keysView{Keys: keys, New: plaintext, Full: len(keys) >= MaxKeys, Now: p.cfg.Now()}
	if plaintext != "" {
		d, err := p.apiDocs(p.ctx(ctx), v.Tenant)
		if err != nil {
			return p.internal(ctx, err)
		}
		if kv.Example = d.Example; kv.Example != nil {
			kv.Curl = kv.Example.curl(plaintext)
		}
	}
	return p.render(ctx, status, "keys", page{Title: "Your API keys", Nav: "keys", Form: f, Data: kv})
}

// keyCreate makes a key with the form's label and expiry (a date: the key works until
// that day ends, UTC). The plaintext goes to the next page through the session's
// one-time flash, never into a URL.
func (p *Portal) keyCreate(ctx *fiber.Ctx) error {
	v, a := viewOf(ctx), account(ctx)
	f := keyForm{Label: strings.TrimSpace(ctx.FormValue("label")), Expires: strings.TrimSpace(ctx.FormValue("expires")), Errors: map[string]string{}}
	plain, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: v.Tenant.ID, ConsumerID: a.ConsumerID, Prefix: display, Hash: hash, Label: f.Label}
	if f.Expires != "" {
		day, err := time.Parse("2006-01-02", f.Expires)
		if err != nil {
			f.Errors["expires"] = "must be a date as YYYY-MM-DD"
		} else {
			end := day.Add(24*time.Hour - time.Second).UTC()
			k.ExpiresAt = &end
		}
	}
	if err := k.Validate(p.cfg.Now()); err != nil {
		fieldError(err, f.Errors)
	}
	if f.Errors["expires_at"] != "" {
		f.Errors["expires"] = "must be today or later"
	}
	keys, _, err := p.cfg.Consumers.ListKeys(p.ctx(ctx), v.Tenant.ID, a.ConsumerID, tenants.Page{Limit: MaxKeys})
	if err != nil {
		return p.internal(ctx, err)
	}
	if len(keys) >= MaxKeys {
		f.Errors["form"] = "You have the most keys an account may have. Revoke one you no longer use first."
	}
	if len(f.Errors) > 0 {
		return p.renderKeys(ctx, http.StatusUnprocessableEntity, f, "")
	}
	if err := p.cfg.Consumers.CreateKey(p.audited(ctx, a, tenants.AuditAction("keys", tenants.AuditCreate), ""), k); err != nil {
		if fieldError(err, f.Errors) && tenants.ErrorCode(err) == tenants.EValidation {
			return p.renderKeys(ctx, http.StatusUnprocessableEntity, f, "")
		}
		return p.internal(ctx, err)
	}
	if err := p.setFlash(ctx, plain); err != nil {
		return p.internal(ctx, err)
	}
	return ctx.Redirect(url(ctx, "/keys"), http.StatusSeeOther)
}

func (p *Portal) keyDelete(ctx *fiber.Ctx) error {
	v, a := viewOf(ctx), account(ctx)
	id := ctx.Params("id")
	err := p.cfg.Consumers.DeleteKey(p.audited(ctx, a, tenants.AuditAction("keys", tenants.AuditDelete), id), v.Tenant.ID, a.ConsumerID, id)
	if err != nil {
		return p.internal(ctx, err)
	}
	return ctx.Redirect(url(ctx, "/keys?done=key-revoked"), http.StatusSeeOther)
}

// offer is one public plan as the plans page shows it.
type offer struct {
	*tenants.ConsumerPlan
	Price   *billing.Price
	Paid    bool
	Current bool
}

type plansView struct {
	Offers      []offer
	CanCheckout bool
	Error       string
}

func (p *Portal) plansPage(ctx *fiber.Ctx) error {
	offers, err := p.offers(ctx)
	if err != nil {
		return p.internal(ctx, err)
	}
	return p.render(ctx, http.StatusOK, "plans", page{Title: "Plans", Nav: "plans", Data: plansView{Offers: offers, CanCheckout: p.cfg.Checkout != nil}})
}

// offers are the tenant's public plans with this month's prices, the signed-in
// consumer's own marked.
func (p *Portal) offers(ctx *fiber.Ctx) ([]offer, error) {
	v := viewOf(ctx)
	current := ""
	if a := account(ctx); a != nil && a.ConsumerID != "" {
		c, err := p.cfg.Consumers.FindConsumer(p.ctx(ctx), v.Tenant.ID, a.ConsumerID)
		if err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
			return nil, err
		}
		if c != nil {
			current = c.Plan
		}
	}
	plans, _, err := p.cfg.Plans.ListPlans(p.ctx(ctx), v.Tenant.ID, tenants.Page{Limit: tenants.MaxPageLimit})
	if err != nil {
		return nil, err
	}
	var out []offer
	for _, pl := range plans {
		if !pl.Public {
			continue
		}
		o := offer{ConsumerPlan: pl, Current: pl.Name == current}
		if p.cfg.Prices != nil {
			pr, err := p.cfg.Prices.PriceAt(p.ctx(ctx), v.Tenant.ID, pl.Name, billing.PeriodOf(p.cfg.Now()))
			if err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
				return nil, err
			}
			o.Price = pr
			o.Paid = pr != nil && (pr.MonthlyFee > 0 || pr.UnitPrice > 0)
		}
		out = append(out, o)
	}
	return out, nil
}

// planChoose switches the consumer to a free (or unpriced) public plan at once, and
// sends it to Stripe Checkout for a priced one: that plan applies when the payment's
// webhook arrives.
func (p *Portal) planChoose(ctx *fiber.Ctx) error {
	v, a := viewOf(ctx), account(ctx)
	offers, err := p.offers(ctx)
	if err != nil {
		return p.internal(ctx, err)
	}
	name := ctx.FormValue("plan")
	var chosen *offer
	for i := range offers {
		if offers[i].Name == name {
			chosen = &offers[i]
		}
	}
	problem := func(msg string) error {
		return p.render(ctx, http.StatusUnprocessableEntity, "plans", page{Title: "Plans", Nav: "plans",
			Data: plansView{Offers: offers, CanCheckout: p.cfg.Checkout != nil, Error: msg}})
	}
	switch {
	case chosen == nil:
		return problem("There is no plan " + `"` + name + `"` + " to choose here.")
	case chosen.Current:
		return ctx.Redirect(url(ctx, "/plans"), http.StatusSeeOther)
	case chosen.Paid && p.cfg.Checkout == nil:
		return problem("Payments are not set up for this API yet, so the plan " + name + " cannot be bought here.")
	case chosen.Paid:
		err := p.checkout(ctx, chosen)
		if tenants.ErrorCode(err) == tenants.EValidation {
			// Checkout takes a monthly fee; a plan priced only by usage cannot be bought there.
			return problem("The plan " + name + " cannot be bought here: " + tenants.ErrorMessage(err) + ".")
		}
		if tenants.ErrorCode(err) == tenants.EConflict {
			// The tenant's Stripe account is not proven or not ready: nothing is charged.
			return problem("The plan " + name + " cannot be bought here yet: " + tenants.ErrorMessage(err) + ".")
		}
		return err
	}
	c, err := p.cfg.Consumers.FindConsumer(p.ctx(ctx), v.Tenant.ID, a.ConsumerID)
	if err != nil {
		return p.internal(ctx, err)
	}
	c.Plan = name
	if err := p.cfg.Consumers.UpdateConsumer(p.audited(ctx, a, tenants.AuditAction("consumers", tenants.AuditUpdate), c.ID), c); err != nil {
		if tenants.ErrorCode(err) == tenants.EVersionConflict {
			return problem("Your account changed meanwhile. Choose again.")
		}
		return p.internal(ctx, err)
	}
	return ctx.Redirect(url(ctx, "/plans?done=plan-chosen"), http.StatusSeeOther)
}

func (p *Portal) checkout(ctx *fiber.Ctx, o *offer) error {
	v, a := viewOf(ctx), account(ctx)
	back := p.publicBase(ctx)
	if onCustomHost(ctx) {
		// The host was matched against the verified domains, so it is not the client's
		// to choose: send the consumer back where it came from.
		back = "https://" + v.Settings.Hostname
	}
	u, err := p.cfg.Checkout.StartCheckout(p.ctx(ctx), billing.CheckoutRequest{
		TenantID: v.Tenant.ID, ConsumerID: a.ConsumerID, Plan: o.Name, Price: *o.Price, Email: a.Email,
		SuccessURL: back + "/plans?done=checkout", CancelURL: back + "/plans",
	})
	if code := tenants.ErrorCode(err); code == tenants.EValidation || code == tenants.EConflict {
		return err
	}
	if err != nil {
		return p.internal(ctx, err)
	}
	return ctx.Redirect(u, http.StatusSeeOther)
}

type usageDay struct {
	Day      time.Time
	Requests int64
	Width    int // of the day's bar, 0–300
}

type usageView struct {
	Enabled     bool
	Plan        string
	Quota       int64
	Total       int64
	Billable    int64  // what the quota counts: the calls the API itself answered
	FunctionMS  string // the consumer's function time this month, "" when none ran
	QuotaWidth  int
	Days        []usageDay
	Period      string
	Percent     int64
	BarMaxWidth int
}

// usagePage shows the consumer's requests this month, by day, against its plan's quota.
func (p *Portal) usagePage(ctx *fiber.Ctx) error {
	v, a := viewOf(ctx), account(ctx)
	now := p.cfg.Now().UTC()
	period := billing.PeriodOf(now)
	uv := usageView{Enabled: p.cfg.Usage != nil, Period: period.Start().Format("January 2006"), BarMaxWidth: 300}
	c, err := p.cfg.Consumers.FindConsumer(p.ctx(ctx), v.Tenant.ID, a.ConsumerID)
	if err != nil {
		return p.internal(ctx, err)
	}
	uv.Plan = c.Plan
	if c.Plan != "" {
		if uv.Quota, err = p.quotaOf(ctx, c.Plan); err != nil {
			return p.internal(ctx, err)
		}
	}
	if uv.Enabled {
		q := billing.UsageQuery{TenantID: v.Tenant.ID, From: period.Start(), To: billing.Hour(now).Add(time.Hour),
			Granularity: billing.GranularityDay, ByConsumer: true}
		rep, err := p.cfg.Usage.Usage(p.ctx(ctx), q)
		if err != nil {
			return p.internal(ctx, err)
		}
		uv.Days, uv.Total = byDay(rep, c.ID, period.Start(), now)
		var fn int64
		for _, it := range rep.Items {
			if it.ConsumerID != nil && *it.ConsumerID == c.ID {
				fn += it.FunctionUS
				uv.Billable += it.Billable
			}
		}
		if fn > 0 {
			uv.FunctionMS = forms.GroupDigits(fn/1000) + fmt.Sprintf(".%03d", fn%1000)
		}
	}
	var peak int64 = 1
	for _, d := range uv.Days {
		peak = max(peak, d.Requests)
	}
	for i := range uv.Days {
		uv.Days[i].Width = int(uv.Days[i].Requests * int64(uv.BarMaxWidth) / peak)
	}
	if uv.Quota > 0 {
		uv.Percent = min(uv.Billable*100/uv.Quota, 100)
		uv.QuotaWidth = int(uv.Percent * int64(uv.BarMaxWidth) / 100)
	}
	return p.render(ctx, http.StatusOK, "usage", page{Title: "Your usage", Nav: "usage", Data: uv})
}

// byDay folds the report's items of consumer id into one entry per day of the month so
// far, days without traffic included.
func byDay(rep *billing.UsageReport, id string, from, now time.Time) ([]usageDay, int64) {
	counts := map[time.Time]int64{}
	var total int64
	for _, it := range rep.Items {
		if it.ConsumerID == nil || *it.ConsumerID != id {
			continue
		}
		day := it.Start.UTC().Truncate(24 * time.Hour)
		counts[day] += it.Requests
		total += it.Requests
	}
	var days []usageDay
	for d := from; !d.After(now); d = d.AddDate(0, 0, 1) {
		days = append(days, usageDay{Day: d, Requests: counts[d]})
	}
	return days, total
}

func (p *Portal) quotaOf(ctx *fiber.Ctx, plan string) (int64, error) {
	plans, _, err := p.cfg.Plans.ListPlans(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.Page{Limit: tenants.MaxPageLimit})
	if err != nil {
		return 0, err
	}
	for _, pl := range plans {
		if pl.Name == plan && pl.Quota != nil {
			return pl.Quota.Requests, nil
		}
	}
	return 0, nil
}
