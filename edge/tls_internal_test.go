package edge

import "testing"

// An IP address sent as SNI (OpenSSL clients do, against RFC 6066) names no tenant: it
// must count as no SNI, not as a mismatch with the Host header.
func TestIPLiteralSNI(t *testing.T) {
	for sni, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "[::1]": true, "2001:db8::1": true,
		"acme.localhost": false, "localhost": false, "1.2.3.example": false, "": false,
	} {
		if got := isIPLiteral(sni); got != want {
			t.Errorf("isIPLiteral(%q) = %v, want %v", sni, got, want)
		}
	}
}
