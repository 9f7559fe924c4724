package edge

import (
	"encoding/json"
	"tollgate/edge/grpcstatus"

	"tollgate/edge/grpcweb"
	"tollgate/edge/routing"
	"tollgate/tenants"
)

// reply is an error the edge itself answers with, rendered once at start: the body is
// prefix + request id + `"}}`, so sending one costs two appends, and a gRPC caller's
// Grpc-Message is ready too.
type reply struct {
	status  int
	code    string
	prefix  []byte // {"error":{"code":"…","message":"…","request_id":"
	grpcMsg []byte // the message, percent-encoded for Grpc-Message
	codeHdr []byte // the code, for X-Tollgate-Error
	message string // for the request log
}

var replySuffix = []byte(`"}}`)

func newReply(code, message string) *reply {
	c, _ := json.Marshal(code)
	m, _ := json.Marshal(message)
	p := make([]byte, 0, 64+len(c)+len(m))
	p = append(p, `{"error":{"code":`...)
	p = append(p, c...)
	p = append(p, `,"message":`...)
	p = append(p, m...)
	p = append(p, `,"request_id":"`...)
	return &reply{status: tenants.Status(code), code: code, prefix: p,
		grpcMsg: grpcweb.AppendPercentEncoded(nil, message), codeHdr: []byte(code), message: message}
}

// The edge's own answers. Messages tell a client what to fix without naming internals.
var (
	replyLoading          = newReply(tenants.ENotReady, "the edge is still loading its configuration; retry shortly")
	replyDraining         = newReply(tenants.ENotReady, "the edge is shutting down; retry on another")
	replyTenantNotFound   = newReply(tenants.ETenantNotFound, "the Host header names no tenant of this edge")
	replyRouteNotFound    = newReply(tenants.ERouteNotFound, "no route of this API matches the path")
	replyMethodNotAllowed = newReply(tenants.EMethodNotAllowed, "this API's routes for the path do not take the method; Allow lists those they take")
	replyBadTarget        = newReply(tenants.EInvalidRequest, string(routing.ErrPathNotOrigin))
	replyBadRequest       = newReply(tenants.EInvalidRequest, "the request is not valid HTTP")
	replyHeaderTooLarge   = newReply(tenants.EInvalidRequest, "the request headers are too large")
	replyNoKey            = newReply(tenants.EUnauthenticated, "this API needs a key in the X-API-Key header")
	replyBadKey           = newReply(tenants.EInvalidCredential, "the API key is not valid for this API")
	replyExpiredKey       = newReply(tenants.EExpiredKey, "the API key has expired; ask for a new one")
	replyBodyTooLarge     = newReply(tenants.EBodyTooLarge, "the request body is over this API's size limit")
	replyBodyRead         = newReply(tenants.EInvalidRequest, "the request body could not be read")
	replyBodyText         = newReply(tenants.EInvalidRequest, "the gRPC-Web -text body is not base64")
	replyInternalError    = newReply(tenants.EInternal, "internal error")
)

// pathReplies maps each path refusal to its answer.
var pathReplies = map[routing.PathError]*reply{
	routing.ErrPathNotOrigin:    replyBadTarget,
	routing.ErrPathEncodedSlash: newReply(tenants.EInvalidRequest, string(routing.ErrPathEncodedSlash)),
	routing.ErrPathBadEscape:    newReply(tenants.EInvalidRequest, string(routing.ErrPathBadEscape)),
	routing.ErrPathBadByte:      newReply(tenants.EInvalidRequest, string(routing.ErrPathBadByte)),
	routing.ErrPathAboveRoot:    newReply(tenants.EInvalidRequest, string(routing.ErrPathAboveRoot)),
}

// fail answers the request with one of the edge's own errors: the JSON envelope, or for
// a gRPC caller, which reads no body from a failed call, a gRPC status (grpcFail).
func (x *exchange) fail(r *reply) {
	x.reply = r
	resp := &x.ctx.Response
	resp.Reset()
	if ct := grpcstatus.ContentType(x.ctx.Request.Header.ContentType()); ct != nil {
		x.grpcFail(r, ct)
		return
	}
	resp.SetStatusCode(r.status)
	resp.Header.SetContentTypeBytes(contentTypeJSON)
	resp.AppendBody(r.prefix)
	resp.AppendBody(x.reqID)
	resp.AppendBody(replySuffix)
}

// failMethod answers a request whose path some route takes with other methods, allowed.
func (x *exchange) failMethod(allowed routing.Methods) {
	x.fail(replyMethodNotAllowed)
	x.ctx.Response.Header.SetCanonical(hdrAllow, allowed.Allow())
}

var (
	contentTypeJSON = []byte("application/json")
	hdrAllow        = []byte("Allow")
)
