// Custom HMAC-signature authentication, as seed 000 wrote it for its old gateway: the
// caller sends X-Key-Id, X-Date (RFC 1123, within five minutes) and X-Signature =
// hex(HMAC-SHA256(secret, method + path + date)). The plugin configuration maps key ids
// to secrets, one "id=secret" per line. A good signature names the consumer (the key id)
// through the ["tollgate","consumer"] property; a bad one names nobody, so the edge
// answers 401.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"guests/abi"
)

var secrets = map[string][]byte{}

func init() {
	abi.OnConfigure = func(c []byte) bool {
		for _, line := range strings.Split(string(c), "\n") {
			id, secret, ok := strings.Cut(strings.TrimSpace(line), "=")
			if ok && id != "" && secret != "" {
				secrets[id] = []byte(secret)
			}
		}
		return len(secrets) > 0
	}
	abi.OnRequestHeaders = func(uint32, bool) uint32 {
		if why := check(); why != "" {
			abi.Log(abi.LogWarn, "hmac: "+why)
		}
		return abi.Continue
	}
}

func check() string {
	id, _ := abi.Header(abi.RequestHeaders, "x-key-id")
	date, _ := abi.Header(abi.RequestHeaders, "x-date")
	sig, _ := abi.Header(abi.RequestHeaders, "x-signature")
	if id == "" || date == "" || sig == "" {
		return "missing X-Key-Id, X-Date or X-Signature"
	}
	secret, ok := secrets[id]
	if !ok {
		return "unknown key id"
	}
	t, err := time.Parse(time.RFC1123, date)
	if err != nil {
		return "X-Date is not RFC 1123"
	}
	if d := time.Since(t); d > 5*time.Minute || d < -5*time.Minute {
		return "X-Date is too far from now"
	}
	method, _ := abi.Property("request", "method")
	path, _ := abi.Property("request", "path")
	mac := hmac.New(sha256.New, secret)
	mac.Write(method)
	mac.Write(path)
	mac.Write([]byte(date))
	want := mac.Sum(nil)
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, want) {
		return "bad signature"
	}
	abi.SetProperty([]byte(id), "tollgate", "consumer")
	return ""
}

func main() {}
