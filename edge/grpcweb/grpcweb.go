// Package grpcweb is a codec for gRPC-Web bodies (the gRPC-Web protocol, grpc/grpc
// doc/PROTOCOL-WEB.md): it splits a request body into its length-prefixed frames, in the
// binary variant (application/grpc-web[+proto]) and the base64 one
// (application/grpc-web-text[+proto], whose body may be several padded base64 chunks one
// after another), and writes a response body: data frames and the trailer frame that
// carries grpc-status and grpc-message, base64-encoded frame by frame for -text. For a
// proxy that relays a gRPC answer as gRPC-Web, TextEncoder base64-encodes a binary body
// as it streams in pieces of any size, still a padded chunk per frame.
//
// It is bounded: a frame whose declared length is over the caller's maximum is refused
// before any of it is read or allocated, and a frame within it is buffered only as its
// bytes arrive. It does no I/O of its own beyond the reader and writer it is given, knows
// nothing of HTTP or of the edge, and does not decompress: a compressed frame is handed
// over as it came, flagged.
package grpcweb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame flags (the first byte of a frame's 5-byte prefix).
const (
	FlagCompressed byte = 0x01 // the message is compressed with the call's grpc-encoding
	FlagTrailer    byte = 0x80 // the frame is the trailer block, not a message
)

// PrefixLen is the length of a frame's prefix: flags, then the length, big-endian.
const PrefixLen = 5

// DefaultMaxFrame is the bound of a frame's data when the caller gives none: gRPC's
// default largest received message.
const DefaultMaxFrame = 4 << 20

// Frame is one frame of a body.
type Frame struct {
	Flags byte
	Data  []byte
}

// Trailer reports whether the frame is the trailer block.
func (f Frame) Trailer() bool { return f.Flags&FlagTrailer != 0 }

// Compressed reports whether the frame's message is compressed.
func (f Frame) Compressed() bool { return f.Flags&FlagCompressed != 0 }

var (
	// ErrFrameTooLarge: a frame declares more data than the maximum. Errors wrap it
	// with the figures.
	ErrFrameTooLarge = errors.New("grpcweb: frame over the maximum length")
	// ErrTruncated: the body ends inside a frame (its prefix or its data).
	ErrTruncated = errors.New("grpcweb: body ends inside a frame")
	// ErrBase64: a -text body is not base64 (or padded chunks of it).
	ErrBase64 = errors.New("grpcweb: malformed base64 in a -text body")
)

func tooLarge(n uint32, maxLen int) error {
	return fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, maxLen)
}

func bound(maxLen int) int {
	if maxLen <= 0 {
		return DefaultMaxFrame
	}
	return maxLen
}

// Cut reads the first frame of an in-memory binary body b: its data is a slice of b and
// rest is what follows it. An empty b is io.EOF.
func Cut(b []byte, maxLen int) (f Frame, rest []byte, err error) {
	if len(b) == 0 {
		return Frame{}, nil, io.EOF
	}
	if len(b) < PrefixLen {
		return Frame{}, b, ErrTruncated
	}
	n := binary.BigEndian.Uint32(b[1:PrefixLen])
	if uint64(n) > uint64(bound(maxLen)) {
		return Frame{}, b, tooLarge(n, bound(maxLen))
	}
	end := PrefixLen + int(n)
	if len(b) < end {
		return Frame{}, b, ErrTruncated
	}
	return Frame{Flags: b[0], Data: b[PrefixLen:end:end]}, b[end:], nil
}

// Decoder reads the frames of a request body as it streams.
type Decoder struct {
	r   io.Reader
	max int
	pre [PrefixLen]byte
	buf []byte
}

// NewDecoder reads frames of at most maxLen bytes of data (DefaultMaxFrame when
// maxLen <= 0) from r: a binary body, or with text a -text one (NewTextReader).
func NewDecoder(r io.Reader, text bool, maxLen int) *Decoder {
	if text {
		r = NewTextReader(r)
	}
	return &Decoder{r: r, max: bound(maxLen)}
}

// growStep is how much the buffer of a frame grows by while its data arrives, so that a
// peer declaring a large frame and sending little costs little.
const growStep = 64 << 10

// Next reads the next frame. Its data is valid until the next call. The end of the body
// between frames is io.EOF; inside one, ErrTruncated.
func (d *Decoder) Next() (Frame, error) {
	if _, err := io.ReadFull(d.r, d.pre[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = ErrTruncated
		}
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(d.pre[1:])
	if uint64(n) > uint64(d.max) {
		return Frame{}, tooLarge(n, d.max)
	}
	want := int(n)
	d.buf = d.buf[:0]
	for len(d.buf) < want {
		step := min(want-len(d.buf), growStep)
		if cap(d.buf)-len(d.buf) < step {
			// Double what has arrived, within the frame: the bytes copied stay linear.
			nb := make([]byte, len(d.buf), min(max(2*cap(d.buf), len(d.buf)+step), want))
			copy(nb, d.buf)
			d.buf = nb
		}
		m, err := io.ReadFull(d.r, d.buf[len(d.buf):len(d.buf)+step])
		d.buf = d.buf[:len(d.buf)+m]
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = ErrTruncated
			}
			return Frame{}, err
		}
	}
	return Frame{Flags: d.pre[0], Data: d.buf}, nil
}
