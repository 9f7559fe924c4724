package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/openapiimport"
)

// OpenAPI import: POST /v1/tenants/{slug}/routes:import makes a route of each path of the
// tenant's OpenAPI document. tenants/openapiimport converts the document and writes the
// routes through the config service (one transaction, one audit entry, routes.import),
// as the console's import page does; this handler only reads the body.

// importResult is the answer (an alias, so the endpoint table names it as the others).
type importResult = openapiimport.ImportResult

// importBody is the body of POST .../routes:import.
type importBody struct {
	OpenAPI  any              `json:"openapi" required:"true" doc:"The OpenAPI 3.0 or 3.1 document: a JSON object, or a string holding it as JSON or YAML. External $refs are not followed."`
	Upstream tenants.Upstream `json:"upstream" required:"true" doc:"Every imported route's upstream, as a route's."`
	Auth     string           `json:"auth" enum:"none,key,jwt,key_or_jwt" doc:"Every imported route's auth. Default: from the document's security (an X-API-Key header key: key; http bearer, oauth2, openIdConnect: jwt; both offered: key_or_jwt; none: none)."`
	Prefix   *string          `json:"prefix,omitempty" doc:"Put before every path (\"\" for nothing). Default: the path of the document's first server URL."`
	DryRun   bool             `json:"dry_run" doc:"Answer what the import would do, and change nothing."`
	Prune    bool             `json:"prune" doc:"Delete the routes an earlier import of this document made for paths it no longer has. Default: they are kept and listed in stale."`
}

func (s *Server) importRoutes(c *fiber.Ctx, r *request) error {
	var b importBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	doc, err := importDocument(c.Body())
	if err != nil {
		return err
	}
	res, err := openapiimport.Convert(doc, openapiimport.Options{Upstream: b.Upstream, Auth: b.Auth, Prefix: b.Prefix})
	if err != nil {
		return err
	}
	svc := s.cfg.Config
	if svc == nil {
		return tenants.Errorf(tenants.ENotFound, "this server does not import routes")
	}
	ctx := s.audited(r.ctx, r, r.tenant.ID, "routes", "import", "")
	out, err := openapiimport.Apply(ctx, svc, r.tenant.ID, res, openapiimport.ApplyOptions{DryRun: b.DryRun, Prune: b.Prune})
	if err != nil {
		return err
	}
	if !b.DryRun && s.cfg.APIDocs != nil {
		// The routes are in; a document not kept only leaves the portal's docs behind.
		if err := s.cfg.APIDocs.SaveAPIDoc(r.ctx, r.tenant.ID, doc); err != nil {
			s.log.Warn("api: imported document not kept for the portal", "tenant", r.tenant.Slug, "err", err)
		}
	}
	return reply(c, http.StatusOK, out, 0)
}

// importDocument is the document the body's openapi holds: the object's own bytes, or
// the string's content.
func importDocument(body []byte) ([]byte, error) {
	var raw struct {
		OpenAPI json.RawMessage `json:"openapi"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, syntaxError(err)
	}
	switch {
	case len(raw.OpenAPI) > 0 && raw.OpenAPI[0] == '{':
		return raw.OpenAPI, nil
	case len(raw.OpenAPI) > 0 && raw.OpenAPI[0] == '"':
		var s string
		if err := json.Unmarshal(raw.OpenAPI, &s); err != nil {
			return nil, syntaxError(err)
		}
		return []byte(s), nil
	}
	e := tenants.Errorf(tenants.EInvalidRequest, "openapi is required: the document as a JSON object, or a string holding JSON or YAML")
	e.Field = "openapi"
	return nil, e
}

// fiberPath escapes what Fiber would read as a parameter: a ':' inside a segment
// (routes:import), as opposed to one starting it (:slug).
func fiberPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ':'); j > 0 {
			segs[i] = s[:j] + `\` + s[j:]
		}
	}
	return strings.Join(segs, "/")
}
