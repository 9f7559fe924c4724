package grpcweb_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"tollgate/edge/grpcweb"
)

// Both targets read untrusted request bodies. Seeds: testdata/fuzz/<target>/.
// go test -run x -fuzz FuzzText -fuzztime 30s ./edge/grpcweb/

// FuzzFrames: the in-memory and the streaming decoder split any body into the same
// frames, which re-encode to the bytes they came from; none is over the bound; trailer
// blocks parse and re-encode to the same status.
func FuzzFrames(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 10
		d := grpcweb.NewDecoder(iotest.HalfReader(bytes.NewReader(data)), false, max)
		rest := data
		for {
			cf, r, cerr := grpcweb.Cut(rest, max)
			df, derr := d.Next()
			if (cerr == nil) != (derr == nil) || cerr != nil && !sameKind(cerr, derr) {
				t.Fatalf("Cut: %v, Decoder: %v", cerr, derr)
			}
			if cerr != nil {
				return
			}
			if cf.Flags != df.Flags || !bytes.Equal(cf.Data, df.Data) || len(cf.Data) > max {
				t.Fatalf("Cut %+v, Decoder %+v", cf, df)
			}
			again := append([]byte{cf.Flags}, binary.BigEndian.AppendUint32(nil, uint32(len(cf.Data)))...)
			again = append(again, cf.Data...)
			if !bytes.Equal(again, rest[:len(rest)-len(r)]) {
				t.Fatalf("frame %+v re-encodes to %q, came from %q", cf, again, rest[:len(rest)-len(r)])
			}
			if cf.Trailer() {
				tr := grpcweb.ParseTrailer(cf.Data)
				block := grpcweb.AppendTrailer(nil, tr)
				f2, _, err := grpcweb.Cut(block, 0)
				if err != nil {
					t.Fatal(err)
				}
				if tr2 := grpcweb.ParseTrailer(f2.Data); tr2.Status != tr.Status || len(tr2.Metadata) > len(tr.Metadata) {
					t.Fatalf("trailer %+v re-parses as %+v", tr, tr2)
				}
			}
			rest = r
		}
	})
}

func sameKind(a, b error) bool {
	for _, k := range []error{io.EOF, grpcweb.ErrTruncated, grpcweb.ErrFrameTooLarge} {
		if errors.Is(a, k) {
			return errors.Is(b, k)
		}
	}
	return false
}

// FuzzText: decoding a -text body whole and as it streams a byte at a time agree, on
// the bytes and on refusing; what decodes re-encodes to base64 that decodes to it;
// and a single padded chunk decodes as encoding/base64 decodes it.
func FuzzText(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, err := grpcweb.AppendDecodeText(nil, data)
		streamed, serr := io.ReadAll(grpcweb.NewTextReader(iotest.OneByteReader(bytes.NewReader(data))))
		if (err == nil) != (serr == nil) {
			t.Fatalf("whole: %v, streamed: %v", err, serr)
		}
		if err != nil {
			if !errors.Is(err, grpcweb.ErrBase64) || !errors.Is(serr, grpcweb.ErrBase64) {
				t.Fatalf("errors %v / %v", err, serr)
			}
			if !bytes.Equal(whole, streamed) {
				t.Fatalf("before the error: whole %q, streamed %q", whole, streamed)
			}
			return
		}
		if !bytes.Equal(whole, streamed) {
			t.Fatalf("whole %q, streamed %q", whole, streamed)
		}
		if len(whole) > len(data)/4*3+2 {
			t.Fatalf("%d bytes from %d characters", len(whole), len(data))
		}
		enc := grpcweb.AppendEncodeText(nil, whole)
		if back, err := grpcweb.AppendDecodeText(nil, enc); err != nil || !bytes.Equal(back, whole) {
			t.Fatalf("re-encoded %q decodes to %q %v", enc, back, err)
		}
		if i := bytes.IndexByte(data, '='); len(data)%4 == 0 && (i < 0 || i >= len(data)-2) {
			std, err := base64.StdEncoding.DecodeString(string(data))
			if err == nil && !bytes.Equal(std, whole) {
				t.Fatalf("encoding/base64 decodes %q to %q, the codec to %q", data, std, whole)
			}
		}
	})
}
