package grpcweb_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"tollgate/edge/grpcweb"
)

// body is a request body of two messages, the second compressed, and a trailer.
func body() []byte {
	b := grpcweb.AppendMessage(nil, 0, []byte("hello"))
	b = grpcweb.AppendMessage(b, grpcweb.FlagCompressed, []byte("\x1f\x8b zipped"))
	return grpcweb.AppendTrailer(b, grpcweb.Trailer{Status: 0, Message: "ok"})
}

func TestFrameBytes(t *testing.T) {
	got := string(grpcweb.AppendTrailer(nil, grpcweb.Trailer{Status: 0, Message: "ok"}))
	want := "\x80\x00\x00\x00\x22grpc-status: 0\r\ngrpc-message: ok\r\n"
	if got != want {
		t.Errorf("trailer frame %q, want %q", got, want)
	}
	if got := string(grpcweb.AppendMessage(nil, 0, []byte("hi"))); got != "\x00\x00\x00\x00\x02hi" {
		t.Errorf("message frame %q", got)
	}
}

func TestCutAndDecoder(t *testing.T) {
	b := body()
	var cut []grpcweb.Frame
	for rest := b; ; {
		f, r, err := grpcweb.Cut(rest, 64)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		cut, rest = append(cut, f), r
	}
	for _, text := range []bool{false, true} {
		in := b
		if text {
			in = grpcweb.AppendEncodeText(nil, b)
		}
		d := grpcweb.NewDecoder(iotest.HalfReader(bytes.NewReader(in)), text, 64)
		for i := 0; ; i++ {
			f, err := d.Next()
			if err == io.EOF {
				if i != len(cut) {
					t.Errorf("text %v: %d frames, want %d", text, i, len(cut))
				}
				break
			}
			if err != nil {
				t.Fatalf("text %v: frame %d: %v", text, i, err)
			}
			if i >= len(cut) || f.Flags != cut[i].Flags || !bytes.Equal(f.Data, cut[i].Data) {
				t.Fatalf("text %v: frame %d %+v", text, i, f)
			}
		}
	}
	if len(cut) != 3 || string(cut[0].Data) != "hello" || cut[0].Compressed() || !cut[1].Compressed() || !cut[2].Trailer() {
		t.Fatalf("frames %+v", cut)
	}
	if tr := grpcweb.ParseTrailer(cut[2].Data); tr.Status != 0 || tr.Message != "ok" {
		t.Errorf("trailer %+v", tr)
	}
}

func TestTruncated(t *testing.T) {
	b := body()
	for _, n := range []int{1, 4, 5, 7, len(b) - 1} {
		d := grpcweb.NewDecoder(bytes.NewReader(b[:n]), false, 64)
		var err error
		for err == nil {
			_, err = d.Next()
		}
		if !errors.Is(err, grpcweb.ErrTruncated) {
			t.Errorf("%d bytes: %v, want ErrTruncated", n, err)
		}
		rest := b[:n]
		for err = nil; err == nil; {
			_, rest, err = grpcweb.Cut(rest, 64)
		}
		if !errors.Is(err, grpcweb.ErrTruncated) {
			t.Errorf("Cut of %d bytes: %v, want ErrTruncated", n, err)
		}
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A frame over the bound is refused from its prefix: nothing of it is read, and the
// decoder holds no buffer for it.
func TestFrameTooLarge(t *testing.T) {
	huge := append([]byte{0, 0xff, 0xff, 0xff, 0xff}, strings.Repeat("x", 100)...)
	c := &countingReader{r: bytes.NewReader(huge)}
	// Bytes, not allocations, are what matter here: a race-enabled build adds
	// allocations of its own, never a buffer the size of the frame.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d := grpcweb.NewDecoder(c, false, 1<<20)
	if _, err := d.Next(); !errors.Is(err, grpcweb.ErrFrameTooLarge) {
		t.Fatalf("4 GiB frame: %v", err)
	}
	runtime.ReadMemStats(&after)
	if c.n != grpcweb.PrefixLen {
		t.Errorf("read %d bytes of a refused frame, want its prefix only", c.n)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 256<<10 {
		t.Errorf("%d bytes allocated to refuse a 4 GiB frame", n)
	}
	if _, _, err := grpcweb.Cut(huge, 1<<20); !errors.Is(err, grpcweb.ErrFrameTooLarge) {
		t.Errorf("Cut: %v", err)
	}
	// Within the bound, but the body stops short: the buffer grows as bytes come, not
	// to the declared length.
	short := append([]byte{0, 0, 0x40, 0, 0}, "abc"...) // declares 4 MiB
	d = grpcweb.NewDecoder(bytes.NewReader(short), false, 0)
	var err error
	allocated := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			d = grpcweb.NewDecoder(bytes.NewReader(short), false, 0)
			_, err = d.Next()
		}
	}).AllocedBytesPerOp()
	if !errors.Is(err, grpcweb.ErrTruncated) || allocated > 100<<10 {
		t.Errorf("4 MiB frame cut short: %v, %d bytes allocated", err, allocated)
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"QUJD", "ABC"},
		{"QUI=Qw==", "ABC"},       // two padded chunks
		{"QQ==QkM=RA==", "ABCD"},  // three
		{"QUJDRA", "ABCD"},        // unpadded last group
		{"QUI=QUJDRA", "ABABCD"},  // padded chunk, then an unpadded one
		{"QUJD\nRA==", "\x00err"}, // a line break
		{"QUJ", "AB"},
		{"Q", "\x00err"},
		{"QQ=", "\x00err"},
		{"Q===", "\x00err"},
		{"=QUJ", "\x00err"},
		{"QU-D", "\x00err"},
		{"QQ=A", "\x00err"},
	} {
		got, err := grpcweb.AppendDecodeText(nil, []byte(c.in))
		streamed, serr := io.ReadAll(grpcweb.NewTextReader(iotest.OneByteReader(strings.NewReader(c.in))))
		if c.want == "\x00err" {
			if !errors.Is(err, grpcweb.ErrBase64) || !errors.Is(serr, grpcweb.ErrBase64) {
				t.Errorf("%q: %v / %v, want ErrBase64", c.in, err, serr)
			}
			continue
		}
		if err != nil || serr != nil || string(got) != c.want || string(streamed) != c.want {
			t.Errorf("%q: %q %v, streamed %q %v; want %q", c.in, got, err, streamed, serr, c.want)
		}
	}
}

func TestEncoder(t *testing.T) {
	for _, text := range []bool{false, true} {
		var out bytes.Buffer
		e := grpcweb.NewEncoder(&out, text)
		if err := e.WriteMessage([]byte("first"), false); err != nil {
			t.Fatal(err)
		}
		if err := e.WriteMessage([]byte("second"), true); err != nil {
			t.Fatal(err)
		}
		if err := e.WriteTrailer(grpcweb.Trailer{Status: 16, Message: "no key: 100% café\n",
			Metadata: []grpcweb.Field{{"X-Tollgate-Error", "unauthenticated"}, {"bad\r\nname", "v"}, {"x-evil", "a\r\nb: c"}}}); err != nil {
			t.Fatal(err)
		}
		if text {
			// Each frame is a padded chunk of its own: decodable frame by frame.
			if _, err := base64.StdEncoding.DecodeString(out.String()); err == nil {
				t.Errorf("text body %q is one chunk", out.String())
			}
		}
		d := grpcweb.NewDecoder(&out, text, 0)
		var got []grpcweb.Frame
		for {
			f, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("text %v: %v", text, err)
			}
			f.Data = bytes.Clone(f.Data)
			got = append(got, f)
		}
		if len(got) != 3 || string(got[0].Data) != "first" || !got[1].Compressed() || !got[2].Trailer() {
			t.Fatalf("text %v: %+v", text, got)
		}
		block := string(got[2].Data)
		if !strings.HasPrefix(block, "grpc-status: 16\r\ngrpc-message: no key: 100%25 caf%C3%A9%0A\r\n") ||
			strings.Contains(block, "evil") || strings.Contains(block, "bad") {
			t.Errorf("trailer block %q", block)
		}
		tr := grpcweb.ParseTrailer(got[2].Data)
		if tr.Status != 16 || tr.Message != "no key: 100% café\n" || len(tr.Metadata) != 1 ||
			tr.Metadata[0] != (grpcweb.Field{Name: "x-tollgate-error", Value: "unauthenticated"}) {
			t.Errorf("parsed trailer %+v", tr)
		}
	}
}

func TestPercentEncoded(t *testing.T) {
	for in, want := range map[string]string{
		"plain text; with: punctuation": "plain text; with: punctuation",
		"100% sure":                     "100%25 sure",
		"line\nbreak\ttab":              "line%0Abreak%09tab",
		"café ✓":                        "caf%C3%A9 %E2%9C%93",
		"\x7f~":                         "%7F~",
	} {
		if got := string(grpcweb.AppendPercentEncoded(nil, in)); got != want {
			t.Errorf("AppendPercentEncoded(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTrailerDefaults(t *testing.T) {
	if tr := grpcweb.ParseTrailer([]byte("x-a: 1\r\nno colon\r\ngrpc-status: nope\r\n")); tr.Status != 2 || len(tr.Metadata) != 1 {
		t.Errorf("%+v", tr)
	}
	if tr := grpcweb.ParseTrailer([]byte("Grpc-Status: 7\ngrpc-message: bad %zz %4")); tr.Status != 7 || tr.Message != "bad %zz %4" {
		t.Errorf("%+v", tr)
	}
}
