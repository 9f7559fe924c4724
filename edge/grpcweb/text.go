package grpcweb

import (
	"encoding/base64"
	"io"
)

// The -text variants carry the binary body in base64 (RFC 4648 section 4, with
// padding). A client that sends a stream encodes each piece as it goes, so a body may
// be several padded chunks one after another ("QUI=Qw=="): the decoder reads four
// characters at a time, and a group with padding ends its chunk rather than the body.
// Only the body's last group may lack its padding. Line breaks and other bytes outside
// the alphabet are refused (encoding/base64 would skip line breaks, which would shift
// the groups of the chunks after them).

const invalid = 0xff

var decodeMap = func() (m [256]byte) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range m {
		m[i] = invalid
	}
	for i := 0; i < len(alphabet); i++ {
		m[alphabet[i]] = byte(i)
	}
	return m
}()

// appendGroup appends the bytes of one group of four characters.
func appendGroup(dst []byte, g []byte) ([]byte, error) {
	a, b, c, d := decodeMap[g[0]], decodeMap[g[1]], decodeMap[g[2]], decodeMap[g[3]]
	if a == invalid || b == invalid {
		return dst, ErrBase64
	}
	switch {
	case c != invalid && d != invalid:
		return append(dst, a<<2|b>>4, b<<4|c>>2, c<<6|d), nil
	case c != invalid && g[3] == '=':
		return append(dst, a<<2|b>>4, b<<4|c>>2), nil
	case g[2] == '=' && g[3] == '=':
		return append(dst, a<<2|b>>4), nil
	}
	return dst, ErrBase64
}

// appendTail appends the bytes of an unpadded last group of 2 or 3 characters.
func appendTail(dst []byte, g []byte) ([]byte, error) {
	switch len(g) {
	case 0:
		return dst, nil
	case 2:
		return appendGroup(dst, []byte{g[0], g[1], '=', '='})
	case 3:
		if decodeMap[g[2]] == invalid {
			return dst, ErrBase64
		}
		return appendGroup(dst, []byte{g[0], g[1], g[2], '='})
	}
	return dst, ErrBase64
}

// AppendDecodeText appends the binary body of a whole -text body src to dst.
func AppendDecodeText(dst, src []byte) ([]byte, error) {
	var err error
	for len(src) >= 4 {
		if dst, err = appendGroup(dst, src[:4]); err != nil {
			return dst, err
		}
		src = src[4:]
	}
	return appendTail(dst, src)
}

// AppendEncodeText appends the base64 of one binary piece (a frame, or several) to dst,
// padded, as a -text body carries it.
func AppendEncodeText(dst, src []byte) []byte {
	return base64.StdEncoding.AppendEncode(dst, src)
}

// textReader is a -text body decoded as it streams.
type textReader struct {
	r   io.Reader
	in  [4096]byte
	n   int    // undecoded characters at the start of in
	out []byte // decoded bytes not yet read, in outBuf
	err error  // the reader's error, once it has one
	buf [3072 + 3]byte
}

// NewTextReader reads the binary body of the -text body r: padded chunks one after
// another, the last one maybe unpadded. Malformed base64 is ErrBase64.
func NewTextReader(r io.Reader) io.Reader { return &textReader{r: r} }

func (t *textReader) Read(p []byte) (int, error) {
	for len(t.out) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		m, err := t.r.Read(t.in[t.n:])
		t.n += m
		whole := t.n / 4 * 4
		out, derr := t.buf[:0], error(nil)
		for i := 0; i < whole && derr == nil; i += 4 {
			out, derr = appendGroup(out, t.in[i:i+4])
		}
		copy(t.in[:], t.in[whole:t.n])
		t.n -= whole
		switch {
		case derr != nil:
			t.err = derr
		case err == io.EOF:
			out, derr = appendTail(out, t.in[:t.n])
			t.n = 0
			if t.err = io.EOF; derr != nil {
				t.err = derr
			}
		case err != nil:
			t.err = err
		}
		t.out = out
	}
	c := copy(p, t.out)
	t.out = t.out[c:]
	return c, nil
}
