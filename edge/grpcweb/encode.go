package grpcweb

import (
	"encoding/binary"
	"io"
	"strconv"
)

// Field is one entry of a trailer block besides grpc-status and grpc-message.
type Field struct{ Name, Value string }

// Trailer is what a response's trailer frame says.
type Trailer struct {
	Status   int    // the gRPC status code; 0 is OK
	Message  string // grpc-message, sent percent-encoded; omitted when empty
	Metadata []Field
}

// AppendMessage appends a data frame of msg (flags 0, or FlagCompressed) to dst.
func AppendMessage(dst []byte, flags byte, msg []byte) []byte {
	dst = append(dst, flags&FlagCompressed)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	return append(dst, msg...)
}

// AppendTrailer appends the trailer frame of t to dst: "grpc-status: N\r\n", then
// "grpc-message: …\r\n" and each metadata field, names lower-cased as the protocol
// wants them. A field whose name is not a token, or whose value holds a line break or
// another control byte, is left out: it would break the block's lines.
func AppendTrailer(dst []byte, t Trailer) []byte {
	at := len(dst)
	dst = append(dst, FlagTrailer, 0, 0, 0, 0)
	dst = append(dst, "grpc-status: "...)
	dst = strconv.AppendInt(dst, int64(t.Status), 10)
	dst = append(dst, "\r\n"...)
	if t.Message != "" {
		dst = append(dst, "grpc-message: "...)
		dst = AppendPercentEncoded(dst, t.Message)
		dst = append(dst, "\r\n"...)
	}
	for _, f := range t.Metadata {
		if !token(f.Name) || !fieldValue(f.Value) {
			continue
		}
		for i := 0; i < len(f.Name); i++ {
			c := f.Name[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
		dst = append(dst, ": "...)
		dst = append(dst, f.Value...)
		dst = append(dst, "\r\n"...)
	}
	binary.BigEndian.PutUint32(dst[at+1:at+PrefixLen], uint32(len(dst)-at-PrefixLen))
	return dst
}

// AppendPercentEncoded appends s as grpc-message carries it (the gRPC over HTTP/2
// protocol's Percent-Encoded): bytes outside printable ASCII, and '%', as %XX.
func AppendPercentEncoded(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func fieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Encoder writes a response body: messages, then its trailer.
type Encoder struct {
	w    io.Writer
	text bool
	buf  []byte
	raw  []byte
}

// NewEncoder writes to w, the binary variant, or with text the -text one (each frame
// its own padded base64 chunk, so it can be flushed as it is written).
func NewEncoder(w io.Writer, text bool) *Encoder { return &Encoder{w: w, text: text} }

// WriteMessage writes one data frame.
func (e *Encoder) WriteMessage(msg []byte, compressed bool) error {
	var flags byte
	if compressed {
		flags = FlagCompressed
	}
	return e.write(AppendMessage(e.raw[:0], flags, msg))
}

// WriteTrailer writes the trailer frame, which ends the body.
func (e *Encoder) WriteTrailer(t Trailer) error {
	return e.write(AppendTrailer(e.raw[:0], t))
}

func (e *Encoder) write(frame []byte) error {
	e.raw = frame
	if e.text {
		e.buf = AppendEncodeText(e.buf[:0], frame)
		frame = e.buf
	}
	_, err := e.w.Write(frame)
	return err
}
