// Adds a header to the request the upstream sees and one to the response the client sees.
package main

import "guests/abi"

func init() {
	abi.OnRequestHeaders = func(uint32, bool) uint32 {
		abi.AddHeader(abi.RequestHeaders, "x-function", "request")
		return abi.Continue
	}
	abi.OnResponseHeaders = func(uint32, bool) uint32 {
		abi.AddHeader(abi.ResponseHeaders, "x-function", "response")
		return abi.Continue
	}
}

func main() {}
