package conn

import (
	"bytes"
	"testing"
)

// readAll feeds in through an lfHead in reads of at most size bytes into buffers of cap
// bytes, as a connection's reader would, and returns what the reader got.
func readAll(in []byte, size, bufSize int) []byte {
	h := lfHead{active: true}
	var out []byte
	buf := make([]byte, bufSize)
	for len(in) > 0 || h.pending != nil {
		if p := h.pending; p != nil {
			n := copy(buf, p)
			if h.pending = p[n:]; len(h.pending) == 0 {
				h.pending = nil
			}
			out = append(out, buf[:n]...)
			continue
		}
		n := copy(buf[:min(size, len(buf))], in)
		in = in[n:]
		if h.active {
			n = h.rewrite(buf, n)
		}
		out = append(out, buf[:n]...)
	}
	return out
}

func TestFirstHeadBareLF(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"GET / HTTP/1.1\nHost: a\n\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: a\n\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: a\r\n\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		// The body and what follows the first head are left as they are.
		{"POST / HTTP/1.1\nContent-Length: 4\n\na\nb\nGET / HTTP/1.1\nHost: a\n\n",
			"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\na\nb\nGET / HTTP/1.1\nHost: a\n\n"},
		// A bare CR is not a line end: the line goes on.
		{"GET / HTTP/1.1\nX: a\rb\n\n", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"},
	} {
		for _, size := range []int{1, 2, 3, 7, 4096} {
			for _, bufSize := range []int{1, 5, 4096} {
				if got := readAll([]byte(c.in), size, bufSize); string(got) != c.want {
					t.Errorf("%q in reads of %d into %d: %q, want %q", c.in, size, bufSize, got, c.want)
				}
			}
		}
	}
}

// FuzzFirstHeadBareLF: however the bytes are split into reads, the reader gets the same
// stream, which is the input with a CR put before each bare LF of the first head only.
func FuzzFirstHeadBareLF(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\nHost: a\n\n"), uint8(3))
	f.Add([]byte("POST / HTTP/1.1\nContent-Length: 2\n\nab"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		whole := readAll(in, len(in)+1, len(in)*2+1)
		if got := readAll(in, int(split)%16+1, int(split)%5+1); !bytes.Equal(got, whole) {
			t.Fatalf("split reads %q, one read %q", got, whole)
		}
		// Dropping the CRs put in gives the input back.
		var back []byte
		for i := 0; i < len(whole); i++ {
			if whole[i] == '\r' && i+1 < len(whole) && whole[i+1] == '\n' && len(back)+0 < len(in) && in[len(back)] == '\n' {
				continue
			}
			back = append(back, whole[i])
		}
		if !bytes.Equal(back, in) {
			t.Fatalf("%q became %q", in, whole)
		}
	})
}
