package web

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/openapiimport"
	"tollgate/tenants/rbac"
)

// Routes from an OpenAPI document: paste or upload it, give the upstream and the auth,
// preview what the import would do (a dry run), then import. The conversion and the
// writes are tenants/openapiimport's, as for POST .../routes:import, so the page and the
// API import alike and record the same audit entry (routes.import).

type importForm struct {
	Document string
	Upstream string
	Auth     string // "" takes it from the document
	Prefix   string
	UseBase  bool // the prefix is the first server URL's path (Prefix is ignored)
	Prune    bool
	Errors   map[string]string
}

// importView is the page: the form and, after a preview or an import, its answer.
type importView struct {
	Result  *openapiimport.ImportResult
	Preview bool
	Enabled bool // the store can import
}

// maxUpload bounds an uploaded document; the app's body limit bounds the request too.
const maxUpload = 4 << 20

func (c *Console) importer() (tenants.ConfigService, bool) {
	svc, ok := c.cfg.Tenants.(tenants.ConfigService)
	return svc, ok
}

func (c *Console) importPage(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	_, enabled := c.importer()
	f := importForm{UseBase: true, Errors: map[string]string{}}
	return c.render(ctx, http.StatusOK, "import", page{Title: "Import routes", Nav: "routes", Form: f, Data: importView{Enabled: enabled}})
}

func (c *Console) importRun(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	svc, ok := c.importer()
	if !ok {
		return c.notFound(ctx, nil)
	}
	tv := tenantOf(ctx)
	f := importForm{
		Document: ctx.FormValue("document"), Upstream: ctx.FormValue("upstream"), Auth: ctx.FormValue("auth"),
		Prefix: strings.TrimSpace(ctx.FormValue("prefix")), UseBase: ctx.FormValue("use_base") != "",
		Prune: ctx.FormValue("prune") != "", Errors: map[string]string{},
	}
	if fh, err := ctx.FormFile("file"); err == nil && fh.Size > 0 {
		doc, problem := readUpload(fh.Size, func() (io.ReadCloser, error) { return fh.Open() })
		if problem != "" {
			f.Errors["document"] = problem
		} else {
			f.Document = doc
		}
	}
	view := importView{Preview: ctx.FormValue("action") != "import", Enabled: true}
	if strings.TrimSpace(f.Document) == "" && f.Errors["document"] == "" {
		f.Errors["document"] = "Paste the OpenAPI document (JSON or YAML), or choose its file."
	}
	up := tenants.Upstream{Targets: readTargets(f.Upstream, "upstream", f.Errors)}
	if len(up.Targets) == 0 && f.Errors["upstream"] == "" {
		f.Errors["upstream"] = "Give the URL the imported routes send traffic to."
	}
	if len(f.Errors) > 0 {
		return c.render(ctx, http.StatusUnprocessableEntity, "import", page{Title: "Import routes", Nav: "routes", Form: f, Data: view})
	}
	o := openapiimport.Options{Upstream: up, Auth: f.Auth}
	if !f.UseBase {
		o.Prefix = &f.Prefix
	}
	res, err := openapiimport.Convert([]byte(f.Document), o)
	if err == nil {
		actx := c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("routes", "import"), "")
		view.Result, err = openapiimport.Apply(actx, svc, tv.ID, res, openapiimport.ApplyOptions{DryRun: view.Preview, Prune: f.Prune})
	}
	if err == nil && !view.Preview && c.cfg.Portals != nil {
		// The routes are in; a document not kept only leaves the portal's docs behind.
		if err := c.cfg.Portals.SaveAPIDoc(c.ctx(ctx), tv.ID, []byte(f.Document)); err != nil {
			c.log.Warn("console: imported document not kept for the portal", "tenant", tv.Slug, "err", err)
		}
	}
	if err != nil {
		if !importFieldError(err, f.Errors) {
			return c.internal(ctx, err)
		}
		return c.render(ctx, http.StatusUnprocessableEntity, "import", page{Title: "Import routes", Nav: "routes", Form: f, Data: view})
	}
	return c.render(ctx, http.StatusOK, "import", page{Title: "Import routes", Nav: "routes", Form: f, Data: view})
}

// readUpload reads an uploaded document of size bytes, or says why it cannot, as the
// page shows it.
func readUpload(size int64, open func() (io.ReadCloser, error)) (doc, problem string) {
	if size > maxUpload {
		return "", "The file is too large: documents up to 4 MiB are imported here."
	}
	r, err := open()
	if err != nil {
		return "", "The file could not be read."
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxUpload))
	if err != nil {
		return "", "The file could not be read."
	}
	return string(b), ""
}

// importFieldError puts an import's error next to the field it is about: the document's
// own (openapi…) by the document, the upstream's by the upstream, the rest at the top.
func importFieldError(err error, errs map[string]string) bool {
	var te *tenants.Error
	if !errors.As(err, &te) || te.Code == tenants.EInternal {
		return false
	}
	switch f := te.Field; {
	case f == "openapi" || strings.HasPrefix(f, "openapi."):
		msg := te.Message
		if f != "openapi" {
			msg = strings.TrimPrefix(f, "openapi.") + ": " + msg
		}
		errs["document"] = msg
	case f == "upstream" || strings.HasPrefix(f, "upstream."):
		errs["upstream"] = strings.TrimPrefix(strings.TrimPrefix(f, "upstream"), ".") + ": " + te.Message
	case f == "prefix" || f == "auth":
		errs[f] = te.Message
	default:
		errs["form"] = te.Message
	}
	return true
}
