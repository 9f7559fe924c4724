// Reads its plugin configuration at start and returns it in a response header, with the
// tenant and route it runs for; refuses a configuration that says "refuse".
package main

import "guests/abi"

var config string

func init() {
	abi.OnConfigure = func(c []byte) bool {
		config = string(c)
		return config != "refuse"
	}
	abi.OnResponseHeaders = func(uint32, bool) uint32 {
		abi.ReplaceHeader(abi.ResponseHeaders, "x-config", config)
		if t, ok := abi.Property("tollgate", "tenant"); ok {
			abi.ReplaceHeader(abi.ResponseHeaders, "x-tenant", string(t))
		}
		if r, ok := abi.Property("tollgate", "route"); ok {
			abi.ReplaceHeader(abi.ResponseHeaders, "x-route", string(r))
		}
		if c, ok := abi.Property("tollgate", "consumer"); ok {
			abi.ReplaceHeader(abi.ResponseHeaders, "x-consumer", string(c))
		}
		return abi.Continue
	}
}

func main() {}
