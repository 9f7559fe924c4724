package cache

import (
	"bytes"
	"testing"
)

// FuzzCacheVary feeds an upstream's Vary value and a client's raw header block to the
// cache's Vary handling: parsing never panics, the names it keeps are lower-case field
// names, and the values read for a request are the same however often they are read
// and tell two requests apart whenever one of the varied header lines differs.
func FuzzCacheVary(f *testing.F) {
	f.Add([]byte("Cookie"), []byte("Host: a\r\nCookie: s=1\r\n\r\n"), []byte("s=2"))
	f.Add([]byte("Accept-Encoding, Cookie"), []byte("Cookie: a\r\nAccept-Encoding: br\r\n\r\n"), []byte("gzip"))
	f.Add([]byte("*"), []byte("Accept: */*\r\n"), []byte(""))
	f.Add([]byte(" , accept-language,,X-Consumer-Id "), []byte("Accept-Language: fr\r\nAccept-Language: de\r\n"), []byte("en"))
	f.Add([]byte("X-Forwarded-For"), []byte("X-Forwarded-For: 1.2.3.4\r\n"), []byte("5.6.7.8"))
	f.Add([]byte("Bad Name"), []byte("Bad: x\r\n"), []byte("\x00\x01"))
	f.Add([]byte("x-tollgate-a, A\x00"), []byte("A: \x00\r\n"), []byte("\x80"))
	f.Fuzz(func(t *testing.T, vary, raw, other []byte) {
		names, ok := parseVary(nil, vary)
		if !ok {
			if names != nil {
				t.Fatalf("refused %q but kept names %q", vary, names)
			}
			return
		}
		if len(names) > cacheMaxVaryNames {
			t.Fatalf("%d names kept", len(names))
		}
		for _, n := range names {
			if len(n) == 0 || !bytes.Equal(n, bytes.ToLower(n)) || bytes.ContainsAny(n, "*, \t") {
				t.Fatalf("name %q kept from %q", n, vary)
			}
		}
		consumer := []byte("c-1")
		a := appendVaryValues(nil, names, raw, consumer)
		if b := appendVaryValues([]byte("prefix"), names, raw, consumer); !bytes.Equal(b[len("prefix"):], a) {
			t.Fatalf("values differ by where they are appended")
		}
		if len(names) == 0 || isConsumerVary(names[0]) || bytes.ContainsAny(other, "\r\n") {
			return
		}
		// A request with one more line of the first varied header has other values.
		more := append(append(append(append([]byte(nil), raw...), "\r\n"...), names[0]...), ": "...)
		more = append(append(more, other...), "\r\n"...)
		if bytes.Equal(appendVaryValues(nil, names, more, consumer), a) {
			t.Fatalf("a request with another %s line has the same values: %q", names[0], more)
		}
	})
}
