package grpcweb

import (
	"encoding/base64"
	"encoding/binary"
)

// TextEncoder base64-encodes a binary body (gRPC's frames, which gRPC-Web's data frames
// are byte for byte) as it streams in pieces of any size, for a -text answer. Each frame
// becomes its own padded chunk, as the protocol has servers send them, so a client that
// decodes chunk by chunk gets whole frames; within a frame, every whole group of three
// bytes is encoded as soon as it arrives, so nothing waits for a frame's end but its last
// one or two bytes, and nothing of a frame is held but them. It reads frame lengths
// only to find the boundaries and allocates nothing of its own.
type TextEncoder struct {
	pre   [PrefixLen]byte
	npre  int    // bytes of the current frame's prefix seen
	left  uint32 // data bytes of the current frame still to come; 0: in a prefix
	carry [3]byte
	nc    int // bytes in carry, not yet encoded
}

// Append appends the base64 of the next piece src of the body to dst.
func (t *TextEncoder) Append(dst, src []byte) []byte {
	for len(src) > 0 {
		if t.left == 0 {
			n := copy(t.pre[t.npre:], src)
			dst = t.push(dst, src[:n])
			src = src[n:]
			if t.npre += n; t.npre < PrefixLen {
				continue
			}
			t.npre = 0
			if t.left = binary.BigEndian.Uint32(t.pre[1:]); t.left == 0 {
				dst = t.Flush(dst) // a frame with no data ends with its prefix
			}
			continue
		}
		n := len(src)
		if uint64(n) > uint64(t.left) {
			n = int(t.left)
		}
		dst = t.push(dst, src[:n])
		src = src[n:]
		if t.left -= uint32(n); t.left == 0 {
			dst = t.Flush(dst)
		}
	}
	return dst
}

// Flush appends the bytes held back, padded: at the end of a body that stops inside a
// frame. Append does it itself at each frame's end.
func (t *TextEncoder) Flush(dst []byte) []byte {
	if t.nc > 0 {
		dst = base64.StdEncoding.AppendEncode(dst, t.carry[:t.nc])
		t.nc = 0
	}
	return dst
}

// push encodes b after what is carried, keeping back the bytes short of a group.
func (t *TextEncoder) push(dst, b []byte) []byte {
	if t.nc > 0 {
		k := copy(t.carry[t.nc:], b)
		t.nc += k
		b = b[k:]
		if t.nc < 3 {
			return dst
		}
		dst = base64.StdEncoding.AppendEncode(dst, t.carry[:])
		t.nc = 0
	}
	whole := len(b) / 3 * 3
	dst = base64.StdEncoding.AppendEncode(dst, b[:whole])
	t.nc = copy(t.carry[:], b[whole:])
	return dst
}
