package web

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/edge/function"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Functions: the tenant's WebAssembly filters. An upload is checked as the API checks it
// (edge/function.Validate), put in the object store the edges fetch modules from, then
// kept in Postgres as the function's new current version. A route runs the version it
// names, set on the route's form.

// ModuleStore is where the edges fetch modules from (infra/functionstore).
type ModuleStore interface {
	Put(ctx context.Context, module []byte) (string, error)
}

// FunctionLogReader reads the lines the tenant's functions logged at the edges.
type FunctionLogReader interface {
	FunctionLogs(ctx context.Context, tenantID, function string, limit int) ([]tenants.FunctionLog, error)
}

// maxModuleBytes is the largest upload the form reads: the ceiling of the plans'
// function_bytes (the store refuses what the tenant's plan does not allow).
const maxModuleBytes = 16 << 20

// consoleLogLines is how many log lines the pages show.
const consoleLogLines = 50

type functionForm struct {
	Name   string
	Errors map[string]string
}

func (c *Console) functionsPage(ctx *fiber.Ctx) error {
	return c.functions(ctx, http.StatusOK, functionForm{Errors: map[string]string{}})
}

func (c *Console) functions(ctx *fiber.Ctx, status int, f functionForm) error {
	tv := tenantOf(ctx)
	d := map[string]any{"Enabled": c.cfg.Functions != nil}
	if c.cfg.Functions != nil {
		list, err := c.cfg.Functions.ListFunctions(c.ctx(ctx), tv.ID)
		if err != nil {
			return c.internal(ctx, err)
		}
		d["Items"] = list
		d["Logs"] = c.functionLogs(ctx, tv.ID, "")
	}
	return c.render(ctx, status, "functions", page{Title: "Functions", Nav: "functions", Form: f, Data: d,
		Flash: flashOf(ctx.Query("done"))})
}

// functionLogs is the last lines, newest first; none when the stream does not answer
// (the page still serves).
func (c *Console) functionLogs(ctx *fiber.Ctx, tenantID, name string) []tenants.FunctionLog {
	if c.cfg.FunctionLogs == nil {
		return nil
	}
	lines, err := c.cfg.FunctionLogs.FunctionLogs(c.ctx(ctx), tenantID, name, consoleLogLines)
	if err != nil {
		c.log.Warn("console: function logs", "err", err)
		return nil
	}
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
	}
	return lines
}

func (c *Console) functionUpload(ctx *fiber.Ctx) error {
	if c.cfg.Functions == nil {
		return c.notFound(ctx, nil)
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	f := functionForm{Name: strings.TrimSpace(ctx.FormValue("name")), Errors: map[string]string{}}
	if err := tenants.ValidateFunctionName(f.Name); err != nil {
		f.Errors["name"] = "The name " + err.Error() + " (1–63 characters)"
	}
	module, msg := readModule(ctx)
	if msg != "" {
		f.Errors["module"] = msg
	} else if err := c.cfg.ValidateModule(c.ctx(ctx), module); err != nil {
		f.Errors["module"] = "This module cannot run on the edges: " + err.Error()
	}
	if len(f.Errors) > 0 {
		return c.functions(ctx, http.StatusUnprocessableEntity, f)
	}
	if c.cfg.Modules != nil {
		if _, err := c.cfg.Modules.Put(c.ctx(ctx), module); err != nil {
			c.log.Warn("console: function object store", "err", err)
			ctx.Set(fiber.HeaderRetryAfter, "5")
			return c.errorPage(ctx, http.StatusServiceUnavailable, "Temporarily unavailable",
				"The module store is not answering right now. Try again in a few seconds.")
		}
	}
	actx := c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("functions", tenants.AuditUpdate), f.Name)
	if _, err := c.cfg.Functions.PutFunction(actx, tv.ID, f.Name, module, user(ctx).Email); err != nil {
		if fieldError(err, f.Errors, map[string]string{"function_bytes": "module", "functions": "name"}) {
			return c.functions(ctx, http.StatusUnprocessableEntity, f)
		}
		return c.internal(ctx, err)
	}
	if c.cfg.Modules != nil {
		// A sweep may have deleted the stored copy of these same bytes, dropped earlier,
		// just before this upload committed; the api's upload explains.
		if _, err := c.cfg.Modules.Put(c.ctx(ctx), module); err != nil {
			c.log.Warn("console: function object store, after the upload committed (the reconciler puts it back)", "err", err)
		}
	}
	return ctx.Redirect(c.tenantURL(ctx, "/functions/"+f.Name+"?done=function-uploaded"), http.StatusSeeOther)
}

// readModule reads the uploaded file; the message says what is wrong with it.
func readModule(ctx *fiber.Ctx) ([]byte, string) {
	fh, err := ctx.FormFile("module")
	if err != nil {
		return nil, "Choose the module: a .wasm file"
	}
	if fh.Size > maxModuleBytes {
		return nil, "A module may have at most 16 MiB"
	}
	file, err := fh.Open()
	if err != nil {
		return nil, "The upload could not be read; try again"
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxModuleBytes+1))
	if err != nil || len(b) > maxModuleBytes {
		return nil, "The upload could not be read; try again"
	}
	if len(b) == 0 {
		return nil, "The file is empty"
	}
	return b, ""
}

func (c *Console) functionPage(ctx *fiber.Ctx) error {
	if c.cfg.Functions == nil {
		return c.notFound(ctx, nil)
	}
	tv := tenantOf(ctx)
	fn, err := c.cfg.Functions.FindFunction(c.ctx(ctx), tv.ID, ctx.Params("name"), true)
	if err != nil {
		return c.internal(ctx, err)
	}
	// The routes running it are named by id, as many as one lookup takes; the page counts
	// the rest rather than list tens of thousands.
	shown := fn.Routes[:min(len(fn.Routes), tenants.MaxPageLimit)]
	names, err := c.cfg.Routes.RouteNames(c.ctx(ctx), tv.ID, shown)
	if err != nil {
		return c.internal(ctx, err)
	}
	d := map[string]any{"Function": fn, "Routes": shown, "MoreRoutes": int64(len(fn.Routes) - len(shown)), "RouteNames": names,
		"Logs": c.functionLogs(ctx, tv.ID, fn.Name)}
	return c.render(ctx, http.StatusOK, "function", page{Title: "Function " + fn.Name, Nav: "functions", Data: d,
		Flash: flashOf(ctx.Query("done"))})
}

func (c *Console) functionModule(ctx *fiber.Ctx) error {
	if c.cfg.Functions == nil {
		return c.notFound(ctx, nil)
	}
	sha := ctx.Query("sha256")
	if sha != "" && !tenants.ValidDigest(sha) {
		return c.notFound(ctx, nil)
	}
	name := ctx.Params("name")
	m, err := c.cfg.Functions.FunctionModule(c.ctx(ctx), tenantOf(ctx).ID, name, sha)
	if err != nil {
		return c.internal(ctx, err)
	}
	ctx.Set(fiber.HeaderContentType, "application/wasm")
	ctx.Set(fiber.HeaderContentDisposition, `attachment; filename="`+name+`.wasm"`)
	return ctx.Send(m)
}

func (c *Console) functionDelete(ctx *fiber.Ctx) error {
	if c.cfg.Functions == nil {
		return c.notFound(ctx, nil)
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	name := ctx.Params("name")
	actx := c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("functions", tenants.AuditDelete), name)
	if err := c.cfg.Functions.DeleteFunction(actx, tv.ID, name); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/functions?done=function-deleted"), http.StatusSeeOther)
}

// validateModuleDefault is the edges' own check.
func validateModuleDefault(ctx context.Context, module []byte) error {
	return function.Validate(ctx, module)
}
