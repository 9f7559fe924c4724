package edge

import (
	"tollgate/edge/grpcstatus"
	"tollgate/tenants"
)

// A gRPC caller is refused with a gRPC status, not the JSON envelope: gRPC clients read
// the outcome of a call from grpc-status and grpc-message, and turn any HTTP status but
// 200 into a status of their own that loses the edge's message. The answer is
// trailers-only (the gRPC protocol's name for a response whose one header block carries
// the status and which has no body): 200, the caller's Content-Type family, Grpc-Status,
// Grpc-Message and X-Tollgate-Error with the envelope's code. Over HTTP/2 the door sends
// it as one HEADERS frame that ends the stream, since the body is empty.
//
// The edge counts, meters, logs and traces such a refusal under its HTTP status
// (exchange.status), not the 200 on the wire.

var (
	hdrGRPCStatus    = []byte("Grpc-Status")
	hdrGRPCMessage   = []byte("Grpc-Message")
	hdrTollgateError = []byte("X-Tollgate-Error")
	hdrGRPCTimeout   = []byte("Grpc-Timeout")
)

// grpcFail answers r as a trailers-only gRPC response of Content-Type ct.
func (x *exchange) grpcFail(r *reply, ct []byte) {
	resp := &x.ctx.Response
	resp.SetStatusCode(200)
	resp.Header.SetContentTypeBytes(ct)
	code := grpcstatus.FromHTTP(r.status)
	if r.code == tenants.EUpstreamTimeout && len(x.ctx.Request.Header.PeekBytes(hdrGRPCTimeout)) > 0 {
		// The call's own deadline (or the route's, shorter) passed before the upstream
		// answered: to the caller that is DEADLINE_EXCEEDED, as a server would say, not
		// a service that is down.
		code = grpcstatus.DeadlineExceeded
	}
	resp.Header.SetCanonical(hdrGRPCStatus, grpcstatus.Text(code))
	resp.Header.SetCanonical(hdrGRPCMessage, r.grpcMsg)
	resp.Header.SetCanonical(hdrTollgateError, r.codeHdr)
}
