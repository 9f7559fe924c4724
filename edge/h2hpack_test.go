package edge_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tollgate/edge"
	"tollgate/tenants"
)

// TestH2HeaderTable: with no HPACK dynamic table (the default), every header block the
// edge sends over HTTP/2, an answer to a client or a request to an HTTP/2 upstream,
// decodes on its own, as nginx's do; with HTTP2HeaderTable set, a repeated answer and a
// repeated request refer to the fields the ones before them entered in the table.
func TestH2HeaderTable(t *testing.T) {
	for _, c := range []struct {
		name  string
		table uint32
		alone bool // every block after the first decodes with a fresh decoder
	}{{"none", 0, true}, {"4096", 4096, false}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *edge.Config) { cfg.HTTP2HeaderTable = c.table })
			var up rawH2Upstream
			addr := rawListener(t, up.serve)
			acme := h.tenant("acme")
			h.put(&tenants.Route{ID: "h2", TenantID: acme, Name: "h2", Paths: []string{"/h2"},
				Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: "http://" + addr}}}})
			h.e.Loaded()
			waitFor(t, 2*time.Second, func() string {
				if r := h.get("acme."+domain, "/h2"); r.status != 200 {
					return r.String()
				}
				return ""
			})

			fc := dialH2(t, h.public)
			fc.fr.ReadMetaHeaders = nil // the blocks as sent
			var answers [][]byte
			for id := uint32(1); id <= 5; id += 2 {
				fc.get(id, "/h2")
				answers = append(answers, fc.readHeaderBlock(id))
			}
			checkBlocks(t, "answer", answers, c.alone)
			checkBlocks(t, "upstream request", up.blocks(), c.alone)
		})
	}
}

// checkBlocks wants each block after the first to decode with a fresh decoder (alone),
// or one of them not to.
func checkBlocks(t *testing.T, what string, blocks [][]byte, alone bool) {
	t.Helper()
	if len(blocks) < 3 {
		t.Fatalf("%d %s header blocks, want at least 3", len(blocks), what)
	}
	refers := 0
	for i, b := range blocks {
		if _, err := hpack.NewDecoder(4096, nil).DecodeFull(b); err != nil {
			if alone {
				t.Errorf("%s %d does not decode on its own: %v", what, i+1, err)
			}
			refers++
		}
	}
	if !alone && refers == 0 {
		t.Errorf("with a dynamic table, no %s refers to it", what)
	}
}

// readHeaderBlock reads frames until stream id's first header block, and returns it.
func (r *rawH2) readHeaderBlock(id uint32) []byte {
	r.t.Helper()
	for {
		if f, ok := r.next(id, "headers").(*http2.HeadersFrame); ok && f.StreamID == id {
			if !f.HeadersEnded() {
				r.t.Fatalf("stream %d's headers continue in CONTINUATION frames", id)
			}
			return append([]byte(nil), f.HeaderBlockFragment()...)
		}
	}
}

// rawH2Upstream is an h2c upstream that keeps each request's header block as sent and
// answers 200 with no body.
type rawH2Upstream struct {
	mu  sync.Mutex
	got [][]byte
}

func (u *rawH2Upstream) blocks() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got
}

func (u *rawH2Upstream) serve(c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	var out bytes.Buffer
	enc := hpack.NewEncoder(&out)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			u.mu.Lock()
			u.got = append(u.got, append([]byte(nil), f.HeaderBlockFragment()...))
			u.mu.Unlock()
			out.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "0"})
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: out.Bytes(), EndStream: true, EndHeaders: true}) != nil {
				return
			}
		}
	}
}
