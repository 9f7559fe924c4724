package api

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"sigs.k8s.io/yaml"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// Config as code: GET and PUT /v1/tenants/{slug}/config (see tenants.ConfigDocument). The
// document is JSON or YAML; YAML is turned into JSON first and then decoded as strictly
// as any body, so both spell the same fields and fail alike.

// configParams are the query parameters of PUT .../config.
var configParams = []string{"dry_run", "prune", "force"}

// mimeYAML is the YAML media type; application/x-yaml, text/yaml and text/x-yaml are
// taken as well.
const mimeYAML = "application/yaml"

func isYAML(mediaType string) bool {
	switch mediaType {
	case mimeYAML, "application/x-yaml", "text/yaml", "text/x-yaml":
		return true
	}
	return false
}

// decodeConfig reads a config document (JSON, or YAML by its Content-Type) and checks what
// needs no store: its shape, its names and its access rules, compiled as PUT .../policy
// compiles it. Errors name the document path.
func decodeConfig(ct string, body []byte, limit int) (*tenants.ConfigDocument, error) {
	if limit > 0 && len(body) > limit {
		return nil, tenants.Errorf(tenants.EBodyTooLarge, "request body is over the limit of %d bytes", limit)
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && isYAML(mt) {
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, tenants.Errorf(tenants.EInvalidRequest, "request body is not valid YAML: %s", strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
		}
		ct, body = fiber.MIMEApplicationJSON, j
	}
	var doc tenants.ConfigDocument
	if err := decodeBody(ct, body, 0, &doc, false); err != nil {
		return nil, err
	}
	if err := doc.CheckNames(); err != nil {
		return nil, err
	}
	if p := doc.AccessRules; p != nil {
		if p.Rules == nil {
			return nil, tenants.Invalid("policy.rules", "is required: a list of rules, [] for none (then every call to a policy route is denied)")
		}
		if _, err := accessrules.Compile(p.Rules, p.Roles); err != nil {
			return nil, tenants.AtPath("policy", err)
		}
	}
	return &doc, nil
}

func (s *Server) configService() (tenants.ConfigService, error) {
	if s.cfg.Config == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "this server does not serve config documents")
	}
	return s.cfg.Config, nil
}

// getConfig answers the tenant's document: JSON, indented, or YAML when the client
// accepts it rather than JSON.
func (s *Server) getConfig(c *fiber.Ctx, r *request) error {
	svc, err := s.configService()
	if err != nil {
		return err
	}
	doc, err := svc.ExportConfig(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if isYAML(c.Accepts(fiber.MIMEApplicationJSON, mimeYAML, "application/x-yaml", "text/yaml", "text/x-yaml")) {
		out, err := yaml.JSONToYAML(raw)
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderContentType, mimeYAML)
		return c.Status(http.StatusOK).Send(out)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(http.StatusOK).Send(out.Bytes())
}

// putConfig applies a document and answers the plan. Its audit entry is one config.apply
// of the tenant, whatever the document changes.
func (s *Server) putConfig(c *fiber.Ctx, r *request) error {
	svc, err := s.configService()
	if err != nil {
		return err
	}
	var o tenants.ApplyOptions
	for name, dst := range map[string]*bool{"dry_run": &o.DryRun, "prune": &o.Prune, "force": &o.Force} {
		if *dst, err = queryFlag(c, name); err != nil {
			return err
		}
	}
	doc, err := decodeConfig(contentType(c), c.Body(), s.cfg.ConfigBodyLimit)
	if err != nil {
		return err
	}
	ctx := s.audited(r.ctx, r, r.tenant.ID, "config", tenants.AuditApply, "")
	plan, err := svc.ApplyConfig(ctx, r.tenant.ID, doc, o)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, plan, 0)
}

// isConfigApply reports whether a request applies a config document: PUT
// /v1/tenants/{slug}/config.
func isConfigApply(method, uri string) bool {
	path, _, _ := strings.Cut(uri, "?")
	rest, ok := strings.CutPrefix(path, "/v1/tenants/")
	if method != http.MethodPut || !ok {
		return false
	}
	_, rest, _ = strings.Cut(rest, "/")
	return rest == "config"
}

// bodyLimit is the largest body the request may have.
func (s *Server) bodyLimit(method, uri string) int {
	switch {
	case isFunctionUpload(method, uri):
		return functionBodyLimit
	case isConfigApply(method, uri):
		return s.cfg.ConfigBodyLimit
	}
	return s.cfg.BodyLimit
}

// queryFlag reads a boolean query parameter: absent is false, present without a value
// true, else true/false/1/0.
func queryFlag(c *fiber.Ctx, name string) (bool, error) {
	args := c.Context().QueryArgs()
	if !args.Has(name) {
		return false, nil
	}
	raw := string(args.Peek(name))
	if raw == "" {
		return true, nil
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		e := tenants.Errorf(tenants.EInvalidRequest, "%s must be true or false, got %q", name, raw)
		e.Field = name
		return false, e
	}
	return v, nil
}
