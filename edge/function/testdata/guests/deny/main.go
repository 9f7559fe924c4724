// Refuses a request that carries X-Deny with its own answer: 403, a body and a header.
package main

import "guests/abi"

func init() {
	abi.OnRequestHeaders = func(uint32, bool) uint32 {
		if why, ok := abi.Header(abi.RequestHeaders, "x-deny"); ok {
			abi.Log(abi.LogInfo, "denied: "+why)
			abi.Reply(403, "denied by function: "+why, [2]string{"x-denied-by", "function"}, [2]string{"content-type", "text/plain"})
			return abi.Pause
		}
		return abi.Continue
	}
}

func main() {}
