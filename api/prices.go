package api

import (
	"bytes"
	"context"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Prices. The platform's prices (what a tenant's plan costs) are for the admin token and
// the platform roles the policy allows rbac.BillingPrices (operator, finance); a tenant's
// prices of its consumer plans are tenant-scoped like its plans. Versions are keyed by
// plan and month in the path; the store decides what a valid version is.

// priceBody is the body of PUT .../prices/{plan}/{month}: the version's numbers (the plan
// and the month are the path's).
type priceBody struct {
	Currency         string `json:"currency" required:"true" doc:"ISO 4217, lowercase (usd)."`
	MonthlyFee       int64  `json:"monthly_fee" doc:"Minor units (cents) charged every month on the plan. Default: 0."`
	IncludedRequests int64  `json:"included_requests" doc:"Billable requests included each month before the unit price applies. Default: 0."`
	UnitPrice        int64  `json:"unit_price" doc:"Minor units per unit_requests billable requests over the allowance. Default: 0."`
	UnitRequests     int64  `json:"unit_requests" doc:"Requests the unit price is for. Default: 1000."`
	PerConsumer      bool   `json:"per_consumer" doc:"The allowance and the amounts apply to each consumer of the tenant (platform prices only)."`
	// Function time, metered in microseconds, is priced as its own unit.
	IncludedFunctionMS int64 `json:"included_function_ms" doc:"Milliseconds of function time included each month before the function unit price applies. Default: 0."`
	FunctionUnitPrice  int64 `json:"function_unit_price" doc:"Minor units per function_unit_ms milliseconds of function time over the allowance (the metered microseconds, the charge rounded up). Default: 0."`
	FunctionUnitMS     int64 `json:"function_unit_ms" doc:"Milliseconds of function time the function unit price is for. Default: 1000."`
}

// Descriptions the price endpoints share (endpoints.go).
const (
	pricesDoc         = ` month is YYYY-MM (UTC): a version applies from its month until the plan's next version, so a month begun keeps its price.`
	platformPricesDoc = ` The admin token, or a user with the operator or finance platform role (403 otherwise).`
)

func (s *Server) prices() (billing.PriceService, error) {
	if s.cfg.Prices == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "prices are not enabled on this server")
	}
	return s.cfg.Prices, nil
}

// authorizePlatformPrices lets the admin token and the platform roles allowed
// rbac.BillingPrices manage the platform's prices.
func (s *Server) authorizePlatformPrices(r *request) error {
	if r.who.admin {
		return nil
	}
	role := ""
	if r.who.user != nil {
		role = r.who.user.PlatformRole
	}
	if !s.cfg.Access.Allow(role, rbac.PlatformDomain, rbac.BillingPrices) {
		return tenants.Errorf(tenants.EForbidden, "the platform's prices need the operator or finance role")
	}
	return nil
}

// priceVersion reads :plan and :month: ENotFound for a plan name that cannot exist,
// EValidation for a month that is not one.
func priceVersion(c *fiber.Ctx) (string, billing.Period, error) {
	plan := c.Params("plan")
	if tenants.ValidatePlanName(plan) != nil {
		return "", billing.Period{}, tenants.Errorf(tenants.ENotFound, "plan not found")
	}
	p, err := billing.ParsePeriod(c.Params("month"))
	if err != nil {
		return "", billing.Period{}, tenants.Invalid("effective_from", "the month must be YYYY-MM")
	}
	return plan, p, nil
}

func (s *Server) listPrices(c *fiber.Ctx, r *request, tenantID string) error {
	svc, err := s.prices()
	if err != nil {
		return err
	}
	items, err := svc.ListPrices(r.ctx, tenantID)
	if err != nil {
		return err
	}
	ptrs := make([]*billing.Price, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	return replyList(c, ptrs, "")
}

func (s *Server) putPrice(c *fiber.Ctx, r *request, tenantID string) error {
	svc, err := s.prices()
	if err != nil {
		return err
	}
	plan, month, err := priceVersion(c)
	if err != nil {
		return err
	}
	var b priceBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	p := &billing.Price{TenantID: tenantID, Plan: plan, EffectiveFrom: month.String(), Currency: b.Currency,
		MonthlyFee: b.MonthlyFee, IncludedRequests: b.IncludedRequests, UnitPrice: b.UnitPrice,
		UnitRequests: b.UnitRequests, PerConsumer: b.PerConsumer,
		IncludedFunctionMS: b.IncludedFunctionMS, FunctionUnitPrice: b.FunctionUnitPrice, FunctionUnitMS: b.FunctionUnitMS}
	if err := svc.SetPrice(r.ctx, p); err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, 0)
}

func (s *Server) deletePrice(c *fiber.Ctx, r *request, tenantID string) error {
	svc, err := s.prices()
	if err != nil {
		return err
	}
	plan, month, err := priceVersion(c)
	if err != nil {
		return err
	}
	if err := svc.DeletePrice(r.ctx, tenantID, plan, month); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) listPlatformPrices(c *fiber.Ctx, r *request) error {
	if err := s.authorizePlatformPrices(r); err != nil {
		return err
	}
	return s.listPrices(c, r, "")
}

// platformAudited makes a change of the platform's prices record its entry; the store
// files it under the platform's own id, as it belongs to no tenant.
func (s *Server) platformAudited(c *fiber.Ctx, r *request, verb string) {
	r.ctx = s.audited(r.ctx, r, "", tagPrices, verb, c.Params("plan")+"/"+c.Params("month"))
}

func (s *Server) putPlatformPrice(c *fiber.Ctx, r *request) error {
	if err := s.authorizePlatformPrices(r); err != nil {
		return err
	}
	s.platformAudited(c, r, tenants.AuditUpdate)
	return s.putPrice(c, r, "")
}

func (s *Server) deletePlatformPrice(c *fiber.Ctx, r *request) error {
	if err := s.authorizePlatformPrices(r); err != nil {
		return err
	}
	s.platformAudited(c, r, tenants.AuditDelete)
	return s.deletePrice(c, r, "")
}

func (s *Server) listTenantPrices(c *fiber.Ctx, r *request) error {
	return s.listPrices(c, r, r.tenant.ID)
}

func (s *Server) putTenantPrice(c *fiber.Ctx, r *request) error {
	return s.putPrice(c, r, r.tenant.ID)
}

func (s *Server) deleteTenantPrice(c *fiber.Ctx, r *request) error {
	return s.deletePrice(c, r, r.tenant.ID)
}

// consumerExport serves the tenant's bill of its consumers, in the export's formats.
func (s *Server) consumerExport(c *fiber.Ctx, r *request) error {
	bills, ok := s.cfg.Prices.(billing.ConsumerBills)
	if !ok {
		return tenants.Errorf(tenants.ENotFound, "bills are not enabled on this server")
	}
	p, err := billing.ParsePeriod(c.Query("period"))
	if err != nil {
		return err
	}
	format := c.Query("format", "csv")
	if format != "csv" && format != "json" {
		return tenants.Errorf(tenants.EInvalidRequest, "format must be csv or json")
	}
	rows, err := bills.ConsumerExport(r.ctx, r.tenant.ID, p)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if format == "csv" {
		err = billing.WriteConsumerCSV(&buf, rows)
		c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	} else {
		err = billing.WriteJSON(&buf, p, rows)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="tollgate-`+r.tenant.Slug+`-consumers-`+p.String()+`.`+format+`"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(buf.Bytes())
}

// paymentGrace is what the grace endpoints need of the prices' store.
type paymentGrace interface {
	PaymentGrace(ctx context.Context, tenantID string) (billing.PaymentGrace, error)
	SetPaymentGrace(ctx context.Context, tenantID string, g billing.PaymentGrace) error
}

const paymentGraceDoc = "A plan a consumer bought through Checkout goes back to the plan it had after failure_grace_days once a payment fails (default 3; a later payment within it keeps the plan) and after end_grace_days once its subscription ends (default 0)."

func (s *Server) paymentGrace() (paymentGrace, error) {
	g, ok := s.cfg.Prices.(paymentGrace)
	if !ok {
		return nil, tenants.Errorf(tenants.ENotFound, "payments are not enabled on this server")
	}
	return g, nil
}

func (s *Server) getPaymentGrace(c *fiber.Ctx, r *request) error {
	store, err := s.paymentGrace()
	if err != nil {
		return err
	}
	g, err := store.PaymentGrace(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, g, 0)
}

func (s *Server) putPaymentGrace(c *fiber.Ctx, r *request) error {
	store, err := s.paymentGrace()
	if err != nil {
		return err
	}
	var g billing.PaymentGrace
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &g, false); err != nil {
		return err
	}
	if err := store.SetPaymentGrace(r.ctx, r.tenant.ID, g); err != nil {
		return err
	}
	return reply(c, http.StatusOK, g, 0)
}
