// Keeps each request's path in its context from request headers to response headers,
// where it answers x-path: the path; a request with x-trap traps. Many requests share an
// instance, so a host that mixed up contexts would answer another request's path.
package main

import "guests/abi"

var paths = map[uint32]string{}

func init() {
	abi.OnRequestHeaders = func(uint32, bool) uint32 {
		if _, ok := abi.Header(abi.RequestHeaders, "x-trap"); ok {
			panic("x-trap")
		}
		p, _ := abi.Header(abi.RequestHeaders, ":path")
		paths[abi.Context] = p
		return abi.Continue
	}
	abi.OnResponseHeaders = func(uint32, bool) uint32 {
		abi.AddHeader(abi.ResponseHeaders, "x-path", paths[abi.Context])
		return abi.Continue
	}
	abi.OnDelete = func() { delete(paths, abi.Context) }
}

func main() {}
