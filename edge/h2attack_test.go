package edge_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Raw HTTP/2 clients: a Framer over a loopback connection, to send what no well-behaved
// client does.

type rawH2 struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

// dialH2 opens an h2c connection with prior knowledge and exchanges SETTINGS.
func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, c: c, fr: http2.NewFramer(c, c)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.fr.MaxHeaderListSize = 1 << 20
	r.enc = hpack.NewEncoder(&r.buf)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return r
}

// block encodes header fields, name and value in turn.
func (r *rawH2) block(kv ...string) []byte {
	r.buf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = r.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), r.buf.Bytes()...)
}

func (r *rawH2) writeHeaders(id uint32, end bool, kv ...string) {
	r.t.Helper()
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.block(kv...), EndStream: end, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// get is a GET of path on tenant acme.
func (r *rawH2) get(id uint32, path string) {
	r.writeHeaders(id, true, ":method", "GET", ":scheme", "http", ":authority", "acme.edge.test", ":path", path)
}

// readAnswer reads frames until stream id ends and returns its :status and body.
func (r *rawH2) readAnswer(id uint32) (status, body string) {
	r.t.Helper()
	var b strings.Builder
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("reading stream %d's answer: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = r.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				if s := f.PseudoValue("status"); s != "" {
					status = s
				}
				if f.StreamEnded() {
					return status, b.String()
				}
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				b.Write(f.Data())
				if f.StreamEnded() {
					return status, b.String()
				}
			}
		case *http2.GoAwayFrame:
			r.t.Fatalf("GOAWAY %v before stream %d ended", f.ErrCode, id)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		}
	}
}

// untilClosed reads until the edge closes the connection, and returns the GOAWAY error
// code it sent (if any) and the stream ids it reset and with what code.
func (r *rawH2) untilClosed() (goAway *http2.GoAwayFrame, resets map[uint32]http2.ErrCode) {
	r.t.Helper()
	resets = map[uint32]http2.ErrCode{}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.t.Fatalf("the edge kept the connection open (GOAWAY so far: %v)", goAway)
			}
			return goAway, resets
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			g := *f
			goAway = &g
		case *http2.RSTStreamFrame:
			resets[f.StreamID] = f.ErrCode
		}
	}
}
