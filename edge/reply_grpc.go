package edge

import (
	"strconv"

	"tollgate/edge/routing"
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

// gRPC status codes the edge answers with (grpc/grpc doc/statuscodes.md).
const (
	grpcUnknown           = 2
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// grpcCode is the gRPC status of a refusal's HTTP status. A 400 is INTERNAL, as gRPC's
// own mapping of HTTP statuses has it: the edge could not make sense of what the client
// library sent.
func grpcCode(status int) int {
	switch {
	case status == 400:
		return grpcInternal
	case status == 401:
		return grpcUnauthenticated
	case status == 403:
		return grpcPermissionDenied
	case status == 404, status == 405:
		return grpcUnimplemented
	case status == 413, status == 429:
		return grpcResourceExhausted
	case status >= 500 && status <= 599:
		return grpcUnavailable
	}
	return grpcUnknown
}

// grpcStatusText is each code's Grpc-Status value, spelled once.
var grpcStatusText = func() (t [grpcUnauthenticated + 1][]byte) {
	for i := range t {
		t[i] = []byte(strconv.Itoa(i))
	}
	return t
}()

var (
	hdrGRPCStatus    = []byte("Grpc-Status")
	hdrGRPCMessage   = []byte("Grpc-Message")
	hdrTollgateError = []byte("X-Tollgate-Error")
	hdrGRPCTimeout   = []byte("Grpc-Timeout")

	ctGRPC             = []byte("application/grpc")
	ctGRPCWeb          = []byte("application/grpc-web")
	ctGRPCWebProto     = []byte("application/grpc-web+proto")
	ctGRPCWebText      = []byte("application/grpc-web-text")
	ctGRPCWebTextProto = []byte("application/grpc-web-text+proto")
)

// grpcFail answers r as a trailers-only gRPC response of Content-Type ct.
func (x *exchange) grpcFail(r *reply, ct []byte) {
	resp := &x.ctx.Response
	resp.SetStatusCode(200)
	resp.Header.SetContentTypeBytes(ct)
	code := grpcCode(r.status)
	if r.code == tenants.EUpstreamTimeout && len(x.ctx.Request.Header.PeekBytes(hdrGRPCTimeout)) > 0 {
		// The call's own deadline (or the route's, shorter) passed before the upstream
		// answered: to the caller that is DEADLINE_EXCEEDED, as a server would say, not
		// a service that is down.
		code = grpcDeadlineExceeded
	}
	resp.Header.SetCanonical(hdrGRPCStatus, grpcStatusText[code])
	resp.Header.SetCanonical(hdrGRPCMessage, r.grpcMsg)
	resp.Header.SetCanonical(hdrTollgateError, r.codeHdr)
}

// grpcContentType is the Content-Type of the gRPC answer to a request of Content-Type
// ct, or nil when ct is not gRPC's: application/grpc[+codec] is answered
// application/grpc; gRPC-Web's application/grpc-web[+codec] and
// application/grpc-web-text[+codec] are echoed, +proto kept and any other codec dropped.
// Every edge refusal asks, so a type that cannot be gRPC's is ruled out by its length
// and one byte before any comparison.
func grpcContentType(ct []byte) []byte {
	const prefix = "application/grpc"
	if len(ct) < len(prefix) || ct[12]|0x20 != 'g' || !routing.ASCIIEqualFold(ct[:len(prefix)], prefix) {
		return nil
	}
	rest := ct[len(prefix):]
	for i, c := range rest { // parameters (;charset=…) do not change the family
		if c == ';' || c == ' ' || c == '\t' {
			rest = rest[:i]
			break
		}
	}
	sub, codec := rest, rest[:0]
	for i, c := range rest {
		if c == '+' {
			sub, codec = rest[:i], rest[i+1:]
			break
		}
	}
	proto := routing.ASCIIEqualFold(codec, "proto")
	switch {
	case len(sub) == 0:
		return ctGRPC
	case routing.ASCIIEqualFold(sub, "-web"):
		if proto {
			return ctGRPCWebProto
		}
		return ctGRPCWeb
	case routing.ASCIIEqualFold(sub, "-web-text"):
		if proto {
			return ctGRPCWebTextProto
		}
		return ctGRPCWebText
	}
	return nil
}
