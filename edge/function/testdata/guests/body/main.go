// Masks a field in the request body the upstream sees ("card":"…" becomes "card":"****")
// and appends a line to the response body the client sees.
package main

import (
	"bytes"
	"regexp"

	"guests/abi"
)

var card = regexp.MustCompile(`"card":"[^"]*"`)

func init() {
	abi.OnRequestBody = func(size uint32, _ bool) uint32 {
		b := abi.Body(abi.RequestBody, size)
		if masked := card.ReplaceAll(b, []byte(`"card":"****"`)); !bytes.Equal(masked, b) {
			abi.SetBody(abi.RequestBody, masked)
		}
		return abi.Continue
	}
	abi.OnResponseBody = func(size uint32, _ bool) uint32 {
		b := abi.Body(abi.ResponseBody, size)
		abi.SetBody(abi.ResponseBody, append(b, "\n-- filtered\n"...))
		return abi.Continue
	}
}

func main() {}
