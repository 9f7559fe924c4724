package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// errorBody is the one error envelope of the API (and of the whole gateway).
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string `json:"code" doc:"Stable error code; clients match on it (see the README's table)."`
	Message   string `json:"message" doc:"Human-readable explanation."`
	RequestID string `json:"request_id" doc:"Echoes X-Request-Id; finds the request in the logs."`
	Field     string `json:"field,omitempty" doc:"The offending field as a JSON path, e.g. upstream.targets[0].url."`
}

const localRequestID = "tollgate.request_id"

// requestID returns the request's id, taking a sane incoming X-Request-Id or making one,
// and echoes it in the response header. It is stable for the life of the request.
func requestID(c *fiber.Ctx) string {
	if id, ok := c.Locals(localRequestID).(string); ok {
		return id
	}
	id := c.Get(fiber.HeaderXRequestID)
	if !saneRequestID(id) {
		id = newRequestID()
	}
	c.Locals(localRequestID, id)
	c.Set(fiber.HeaderXRequestID, id)
	return id
}

// saneRequestID admits 1–64 characters of [A-Za-z0-9-_]: enough for UUIDs and trace ids,
// nothing that could break a log line or a header.
func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// frame runs around every request: request id, panic recovery, error rendering (so the
// status is final before the access log line) and the access log line itself.
func (s *Server) frame(c *fiber.Ctx) (err error) {
	start := time.Now()
	id := requestID(c)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("api: panic", "request_id", id, "method", c.Method(), "path", c.Path(),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
		if err != nil {
			s.renderError(c, err)
			err = nil
		}
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			s.log.Debug("api request", "request_id", id, "method", c.Method(), "path", c.Path(),
				"status", c.Response().StatusCode(), "duration", time.Since(start))
		}
	}()
	return c.Next()
}

// errorHandler is Fiber's ErrorHandler: it sees what frame did not (errors fasthttp raises
// before routing, such as an oversize body).
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	if errors.Is(err, fiber.ErrRequestTimeout) {
		// A connection that sent no complete request within ReadTimeout is closed
		// without an answer, as the edge's are: a client that pooled it would read an
		// unrequested 408 as the reply to its next request.
		if conn := c.Context().Conn(); conn != nil {
			_ = conn.Close()
		}
		return nil
	}
	s.renderError(c, err)
	return nil
}

// renderError writes err as the envelope with the status of its code. Errors that are not
// *tenants.Error are logged with the request id and shown as "internal error".
func (s *Server) renderError(c *fiber.Ctx, err error) {
	id := requestID(c)
	e := s.asError(c, err)
	switch e.Code {
	case tenants.EInternal:
		s.log.Error("api: internal error", "request_id", id, "method", c.Method(), "path", c.Path(), "err", err)
	case tenants.ENotReady:
		var te *tenants.Error
		if !errors.As(err, &te) {
			s.log.Warn("api: the store did not answer", "request_id", id, "method", c.Method(), "path", c.Path(), "err", err)
		}
	}
	status := tenants.Status(e.Code)
	switch status {
	case http.StatusServiceUnavailable:
		c.Set(fiber.HeaderRetryAfter, retryAfterSeconds)
	case http.StatusUnauthorized:
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="tollgate"`)
	case http.StatusMethodNotAllowed:
		c.Set(fiber.HeaderAllow, strings.Join(s.allowed(c.Path()), ", "))
	}
	c.Response().Header.Del(fiber.HeaderETag)
	c.Response().Header.Del(fiber.HeaderLocation)
	body, _ := json.Marshal(errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, RequestID: id, Field: e.Field}})
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Response().SetBodyRaw(body)
}

// asError turns any error into the *tenants.Error the client sees.
func (s *Server) asError(c *fiber.Ctx, err error) *tenants.Error {
	var te *tenants.Error
	if errors.As(err, &te) {
		if tenants.Status(te.Code) == http.StatusInternalServerError && te.Code != tenants.EInternal {
			// A code the API has no status for is a bug; never leak its message.
			return &tenants.Error{Code: tenants.EInternal, Message: "internal error"}
		}
		if te.Code == tenants.EInternal {
			return &tenants.Error{Code: tenants.EInternal, Message: "internal error"}
		}
		return te
	}
	if s.cfg.Unavailable(err) {
		return notReady()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fiber.StatusNotFound:
			return tenants.Errorf(tenants.ENotFound, "no endpoint %s %s: see /v1/openapi.json", c.Method(), c.Path())
		case fiber.StatusMethodNotAllowed:
			return tenants.Errorf(tenants.EMethodNotAllowed, "%s is not allowed on %s (allowed: %s)",
				c.Method(), c.Path(), strings.Join(s.allowed(c.Path()), ", "))
		case fiber.StatusRequestEntityTooLarge:
			return tenants.Errorf(tenants.EBodyTooLarge, "request body is over the limit of %d bytes", s.bodyLimit(c.Method(), c.OriginalURL()))
		case fiber.StatusUnsupportedMediaType:
			return tenants.Errorf(tenants.EUnsupportedMedia, "%s", fe.Message)
		}
		if fe.Code >= 400 && fe.Code < 500 {
			return tenants.Errorf(tenants.EInvalidRequest, "%s", strings.ToLower(fe.Message))
		}
	}
	return &tenants.Error{Code: tenants.EInternal, Message: "internal error"}
}

// guardMethods answers methods Fiber does not know (it would reply with plain text)
// with the envelope: 405 on a path the API serves, 404 elsewhere.
func (s *Server) guardMethods() {
	srv := s.app.Server()
	next := srv.Handler
	known := make(map[string]bool, len(fiber.DefaultMethods))
	for _, m := range fiber.DefaultMethods {
		known[m] = true
	}
	srv.Handler = func(ctx *fasthttp.RequestCtx) {
		if known[string(ctx.Method())] {
			next(ctx)
			return
		}
		id := string(ctx.Request.Header.Peek(fiber.HeaderXRequestID))
		if !saneRequestID(id) {
			id = newRequestID()
		}
		path := string(ctx.Path())
		e := errorDetail{Code: tenants.ENotFound, Message: "no endpoint " + path, RequestID: id}
		if allow := s.allowed(path); len(allow) > 0 {
			e.Code = tenants.EMethodNotAllowed
			e.Message = fmt.Sprintf("method %q is not allowed on %s (allowed: %s)", ctx.Method(), path, strings.Join(allow, ", "))
			ctx.Response.Header.Set(fiber.HeaderAllow, strings.Join(allow, ", "))
		}
		body, _ := json.Marshal(errorBody{Error: e})
		ctx.Response.Header.Set(fiber.HeaderXRequestID, id)
		ctx.SetStatusCode(tenants.Status(e.Code))
		ctx.SetContentType(fiber.MIMEApplicationJSON)
		ctx.SetBody(body)
	}
}

// allowed lists the methods the API serves on a concrete path (HEAD with GET).
func (s *Server) allowed(path string) []string {
	var out []string
	for i := range s.endpoints {
		ep := &s.endpoints[i]
		if matchPath(ep.path, path) {
			out = append(out, ep.method)
			if ep.method == fiber.MethodGet {
				out = append(out, fiber.MethodHead)
			}
		}
	}
	return out
}

// matchPath matches a Fiber route pattern of literal and ":param" segments against a path
// (one trailing slash tolerated, as the router does).
func matchPath(pattern, path string) bool {
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if strings.HasPrefix(ps[i], ":") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if ps[i] != xs[i] {
			return false
		}
	}
	return true
}
