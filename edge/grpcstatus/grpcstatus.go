// Package grpcstatus is what the edge answers a gRPC caller it refuses: the gRPC status
// of the HTTP status its JSON envelope would have had, and the Content-Type of the
// answer for the caller's Content-Type (gRPC, gRPC-Web or gRPC-Web-text). Every refusal
// asks, so nothing here allocates.
package grpcstatus

import (
	"strconv"

	"tollgate/edge/routing"
)

// gRPC status codes the edge answers with (grpc/grpc doc/statuscodes.md).
const (
	Unknown           = 2
	DeadlineExceeded  = 4
	PermissionDenied  = 7
	ResourceExhausted = 8
	Unimplemented     = 12
	Internal          = 13
	Unavailable       = 14
	Unauthenticated   = 16
)

// FromHTTP is the gRPC status of a refusal's HTTP status. A 400 is INTERNAL, as gRPC's
// own mapping of HTTP statuses has it: the edge could not make sense of what the client
// library sent.
func FromHTTP(status int) int {
	switch {
	case status == 400:
		return Internal
	case status == 401:
		return Unauthenticated
	case status == 403:
		return PermissionDenied
	case status == 404, status == 405:
		return Unimplemented
	case status == 413, status == 429:
		return ResourceExhausted
	case status >= 500 && status <= 599:
		return Unavailable
	}
	return Unknown
}

// text is each code's Grpc-Status value, spelled once.
var text = func() (t [Unauthenticated + 1][]byte) {
	for i := range t {
		t[i] = []byte(strconv.Itoa(i))
	}
	return t
}()

var (
	typeGRPC         = []byte("application/grpc")
	typeWeb          = []byte("application/grpc-web")
	typeWebProto     = []byte("application/grpc-web+proto")
	typeWebText      = []byte("application/grpc-web-text")
	typeWebTextProto = []byte("application/grpc-web-text+proto")
)

// ContentType is the Content-Type of the gRPC answer to a request of Content-Type
// ct, or nil when ct is not gRPC's: application/grpc[+codec] is answered
// application/grpc; gRPC-Web's application/grpc-web[+codec] and
// application/grpc-web-text[+codec] are echoed, +proto kept and any other codec dropped.
// Every edge refusal asks, so a type that cannot be gRPC's is ruled out by its length
// and one byte before any comparison.
func ContentType(ct []byte) []byte {
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
		return typeGRPC
	case routing.ASCIIEqualFold(sub, "-web"):
		if proto {
			return typeWebProto
		}
		return typeWeb
	case routing.ASCIIEqualFold(sub, "-web-text"):
		if proto {
			return typeWebTextProto
		}
		return typeWebText
	}
	return nil
}

// Text is code's Grpc-Status value (code is one of the constants above).
func Text(code int) []byte { return text[code] }
