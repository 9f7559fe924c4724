// Asks the tenant's authorization service before letting a request through: an HTTP
// callout to the upstream its configuration names, with the request's path; the stream
// waits (Pause) and, on the answer, goes on with the answer's body in x-auth (200) or is
// refused with 403.
package main

import "guests/abi"

var upstream string

func init() {
	abi.OnConfigure = func(c []byte) bool {
		upstream = string(c)
		return upstream != ""
	}
	abi.OnRequestHeaders = func(uint32, bool) uint32 {
		path, _ := abi.Header(abi.RequestHeaders, ":path")
		if _, ok := abi.HTTPCall(upstream, [][2]string{{":method", "GET"}, {":path", "/check" + path}, {":authority", "auth.internal"}}, nil, 500); !ok {
			abi.Reply(503, "callout refused")
		}
		return abi.Pause
	}
	abi.OnCalloutResponse = func(_, _, bodySize, _ uint32) {
		status, _ := abi.Header(abi.CalloutHeaders, ":status")
		if status != "200" {
			abi.Reply(403, "the authorization service said "+status)
			return
		}
		abi.AddHeader(abi.RequestHeaders, "x-auth", string(abi.Body(abi.CalloutBody, bodySize)))
		abi.ContinueRequest()
	}
}

func main() {}
