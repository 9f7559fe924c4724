package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/edge/function"
	"tollgate/tenants"
)

// Functions: a tenant's WebAssembly filters. The body of a PUT is the module itself
// (Content-Type: application/wasm). It is checked (edge/function.Validate: Wasm that
// exports what proxy-wasm needs and imports nothing else), put in the object store the
// edges fetch modules from, and only then stored in Postgres: a route can name a version
// only once the store has it, so no route entry reaches an edge ahead of its module. The
// store's copies are deleted by its sweep (infra/functionstore.Sweep), never here.

// ModuleStore is where the edges fetch modules from, by digest (infra/functionstore).
type ModuleStore interface {
	Put(ctx context.Context, module []byte) (string, error)
}

// FunctionLogReader reads the last lines the tenant's functions logged at the edges
// (infra/functionstore.LogReader).
type FunctionLogReader interface {
	// FunctionLogs returns up to limit of the tenant's latest lines, oldest first, of
	// function only when it is not "".
	FunctionLogs(ctx context.Context, tenantID, function string, limit int) ([]tenants.FunctionLog, error)
}

// MediaWasm is the content type of a module.
const MediaWasm = "application/wasm"

// functionBodyLimit is the largest body a function upload may have: the ceiling of the
// plans' function_bytes. The store refuses what the tenant's plan does not allow.
const functionBodyLimit = 16<<20 + 64<<10 // and the console form's multipart framing

// isFunctionUpload reports whether a request uploads a module: PUT
// /v1/tenants/{slug}/functions/{name}, or the console's upload form (mounted on this app),
// POST /console/t/{slug}/functions, whose multipart body holds the module.
func isFunctionUpload(method, uri string) bool {
	path, _, _ := strings.Cut(uri, "?")
	if method == http.MethodPost {
		rest, ok := strings.CutPrefix(path, "/console/t/")
		_, rest, _ = strings.Cut(rest, "/")
		return ok && rest == "functions"
	}
	if method != http.MethodPut {
		return false
	}
	rest, ok := strings.CutPrefix(path, "/v1/tenants/")
	if !ok {
		return false
	}
	_, rest, _ = strings.Cut(rest, "/")
	name, ok := strings.CutPrefix(rest, "functions/")
	return ok && name != "" && !strings.Contains(name, "/")
}

func (s *Server) functionService() (tenants.FunctionService, error) {
	if s.cfg.Functions == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "functions are not enabled on this server")
	}
	return s.cfg.Functions, nil
}

// namedFunction is the function service and the function name of a request whose path
// names one; a malformed name is simply not found.
func (s *Server) namedFunction(c *fiber.Ctx) (tenants.FunctionService, string, error) {
	fs, err := s.functionService()
	if err != nil {
		return nil, "", err
	}
	name := c.Params("name")
	if err := knownFunctionName(name); err != nil {
		return nil, "", err
	}
	return fs, name, nil
}

func knownFunctionName(name string) error {
	if tenants.ValidateFunctionName(name) != nil {
		return tenants.Errorf(tenants.ENotFound, "function not found")
	}
	return nil
}

func (s *Server) putFunction(c *fiber.Ctx, r *request) error {
	fs, err := s.functionService()
	if err != nil {
		return err
	}
	name := c.Params("name")
	if err := tenants.ValidateFunctionName(name); err != nil {
		return tenants.Invalid("name", "%v", err)
	}
	ct := contentType(c)
	if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), MediaWasm) {
		return tenants.Errorf(tenants.EUnsupportedMedia, "the body must be the module, Content-Type: %s", MediaWasm)
	}
	module := c.Body()
	if len(module) > tenants.MaxResources.FunctionBytes {
		return tenants.Errorf(tenants.EBodyTooLarge, "a module may have at most %d bytes", tenants.MaxResources.FunctionBytes)
	}
	if len(module) == 0 {
		return tenants.Invalid("module", "the body is empty: send the module")
	}
	if err := s.cfg.ValidateModule(r.ctx, module); err != nil {
		return tenants.Invalid("module", "%v", err)
	}
	if s.cfg.Modules != nil {
		if _, err := s.cfg.Modules.Put(r.ctx, module); err != nil {
			s.log.Warn("api: function object store", "request_id", requestID(c), "err", err)
			return tenants.Errorf(tenants.ENotReady, "the module store does not answer; retry")
		}
	}
	f, err := fs.PutFunction(r.ctx, r.tenant.ID, name, module, r.who.actor())
	if err != nil {
		return err
	}
	if s.cfg.Modules != nil {
		// When these bytes were uploaded before and then dropped, the first Put found the
		// old object, and the store's sweep may have deleted it before PutFunction could
		// commit (it waits for the sweep's lock). Putting again costs a lookup otherwise.
		if _, err := s.cfg.Modules.Put(r.ctx, module); err != nil {
			s.log.Warn("api: function object store, after the upload committed (the reconciler puts it back)", "request_id", requestID(c), "err", err)
		}
	}
	return reply(c, http.StatusOK, f, 0)
}

func (s *Server) listFunctions(c *fiber.Ctx, r *request) error {
	fs, err := s.functionService()
	if err != nil {
		return err
	}
	list, err := fs.ListFunctions(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return replyList(c, list, "")
}

func (s *Server) getFunction(c *fiber.Ctx, r *request) error {
	fs, name, err := s.namedFunction(c)
	if err != nil {
		return err
	}
	versions := false
	switch v := c.Query("versions"); v {
	case "", "false":
	case "true":
		versions = true
	default:
		return tenants.Invalid("versions", "must be true or false, got %q", v)
	}
	f, err := fs.FindFunction(r.ctx, r.tenant.ID, name, versions)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, f, 0)
}

func (s *Server) listFunctionVersions(c *fiber.Ctx, r *request) error {
	fs, name, err := s.namedFunction(c)
	if err != nil {
		return err
	}
	f, err := fs.FindFunction(r.ctx, r.tenant.ID, name, true)
	if err != nil {
		return err
	}
	items := make([]*tenants.FunctionVersion, len(f.Versions))
	for i := range f.Versions {
		items[i] = &f.Versions[i]
	}
	return replyList(c, items, "")
}

func (s *Server) getFunctionModule(c *fiber.Ctx, r *request) error {
	fs, name, err := s.namedFunction(c)
	if err != nil {
		return err
	}
	sha := strings.ToLower(c.Query("sha256"))
	if sha != "" && !tenants.ValidDigest(sha) {
		return tenants.Invalid("sha256", "must be 64 hex digits")
	}
	m, err := fs.FunctionModule(r.ctx, r.tenant.ID, name, sha)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, MediaWasm)
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+name+`.wasm"`)
	return c.Status(http.StatusOK).Send(m)
}

func (s *Server) deleteFunction(c *fiber.Ctx, r *request) error {
	fs, name, err := s.namedFunction(c)
	if err != nil {
		return err
	}
	if err := fs.DeleteFunction(r.ctx, r.tenant.ID, name); err != nil {
		return err
	}
	return noContent(c)
}

// functionLogs answers the tenant's latest function log lines: of the function in the
// path, or of all of them (functions:logs, with ?function= to pick one).
func (s *Server) functionLogs(c *fiber.Ctx, r *request) error {
	name := c.Params("name")
	if name == "" {
		name = c.Query("function")
	}
	if name != "" {
		if err := knownFunctionName(name); err != nil {
			return err
		}
	}
	limit := 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > tenants.MaxFunctionLogs {
			return tenants.Invalid("limit", "must be between 1 and %d", tenants.MaxFunctionLogs)
		}
		limit = n
	}
	items := []*tenants.FunctionLog{}
	if s.cfg.FunctionLogs != nil {
		lines, err := s.cfg.FunctionLogs.FunctionLogs(r.ctx, r.tenant.ID, name, limit)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || s.cfg.Unavailable(err) {
				return notReady()
			}
			s.log.Warn("api: function logs", "request_id", requestID(c), "err", err)
			return tenants.Errorf(tenants.ENotReady, "the function log stream does not answer; retry")
		}
		for i := range lines {
			items = append(items, &lines[i])
		}
	}
	return replyList(c, items, "")
}

// validateModuleDefault is edge/function.Validate: what the edges will run.
func validateModuleDefault(ctx context.Context, module []byte) error {
	return function.Validate(ctx, module)
}
