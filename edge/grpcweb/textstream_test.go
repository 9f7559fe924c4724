package grpcweb_test

import (
	"bytes"
	"testing"

	"tollgate/edge/grpcweb"
)

// encodePieces runs a TextEncoder over data cut into pieces of n bytes (n >= 1).
func encodePieces(data []byte, n int) []byte {
	var e grpcweb.TextEncoder
	var out []byte
	for len(data) > 0 {
		k := min(n, len(data))
		out = e.Append(out, data[:k])
		data = data[k:]
	}
	return e.Flush(out)
}

// perFrame is the -text body of whole frames as the Encoder writes it: each frame its
// own padded chunk.
func perFrame(t *testing.T, data []byte) []byte {
	var out []byte
	for len(data) > 0 {
		_, rest, err := grpcweb.Cut(data, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		out = grpcweb.AppendEncodeText(out, data[:len(data)-len(rest)])
		data = rest
	}
	return out
}

func TestTextEncoder(t *testing.T) {
	b := body()
	b = grpcweb.AppendMessage(b, 0, nil) // a frame with no data is a chunk of its own too
	b = grpcweb.AppendMessage(b, 0, bytes.Repeat([]byte("x"), 7000))
	want := perFrame(t, b)
	for _, n := range []int{1, 2, 3, 4, 5, 7, 64, 4096, len(b)} {
		if got := encodePieces(b, n); !bytes.Equal(got, want) {
			t.Errorf("pieces of %d: %q\nwant %q", n, got, want)
		}
	}
	// A body that stops inside a frame: what came is still encoded, and decodes back.
	cut := b[:len(b)-2]
	got := encodePieces(cut, 3)
	if back, err := grpcweb.AppendDecodeText(nil, got); err != nil || !bytes.Equal(back, cut) {
		t.Errorf("truncated body: %q decodes to %v", got, err)
	}
}

// FuzzTextEncoder: any body, in pieces of any size, encodes to base64 that the codec
// decodes back to it; a body of whole frames encodes as the Encoder writes it, a
// padded chunk a frame, whatever the pieces. The body comes from an upstream, which
// the edge does not trust to frame it well.
func FuzzTextEncoder(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, piece byte) {
		out := encodePieces(data, int(piece)+1)
		back, err := grpcweb.AppendDecodeText(nil, out)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("%q encodes to %q, which decodes to %q %v", data, out, back, err)
		}
		rest := data
		var want []byte
		for len(rest) > 0 {
			_, r, err := grpcweb.Cut(rest, 1<<30)
			if err != nil {
				return // not whole frames
			}
			want = grpcweb.AppendEncodeText(want, rest[:len(rest)-len(r)])
			rest = r
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("%q in pieces of %d: %q, want %q", data, int(piece)+1, out, want)
		}
	})
}
