package fnchain

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/edge/function"
)

// FuzzRunHTTP drives the edge's side of the host calls (Run as function.HTTP) with what a
// hostile guest could pass: any header names and values, maps and buffers that do not
// exist in the phase, pseudo-headers, any property path, any local reply. Nothing may
// panic, and the request must stay a request fasthttp can still write.
func FuzzRunHTTP(f *testing.F) {
	f.Add([]byte("\x00\x00x-a\x00b\x01\x02:status\x00999\x03\x00x-a\x04tollgate\x00consumer\x00me"))
	f.Add([]byte("\x05\x02\x00\x00\x06\x00:path\x00/x\x07\x01\x00\x08\x00body\x09\x00\x00"))
	f.Add([]byte("\x0a\x00\x01\xff\x0b\x02\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := &fasthttp.RequestCtx{}
		ctx.Request.SetRequestURI("/r?q=1")
		ctx.Request.Header.SetHost("acme.example")
		ctx.Request.Header.Set("X-Existing", "1")
		ctx.Response.Header.Set("X-Up", "1")
		c := &Chain{h: &Host{logs: &logPublisher{}}, spec: RouteSpec{TenantID: "t", RouteID: "r", Auth: true},
			filters: []*filter{{name: "f", sha: "s"}}}
		r := &Run{c: c, ctx: ctx, props: Props{RouteID: "r", RequestID: []byte("id"), Host: []byte("acme.example")}}
		parts := bytes.Split(data, []byte{0})
		arg := func(i int) []byte {
			if i < len(parts) {
				return parts[i]
			}
			return nil
		}
		for i := 0; i < len(parts); i++ {
			p := parts[i]
			if len(p) == 0 {
				continue
			}
			op, m := p[0]%12, function.MapType(len(p)%4)
			r.phase = int(p[len(p)-1] % 2)
			k, v := arg(i+1), arg(i+2)
			switch op {
			case 0:
				r.AddHeader(m, k, v)
			case 1:
				r.HeaderValue(m, k)
			case 2:
				r.ReplaceHeader(m, k, v)
			case 3:
				r.RemoveHeader(m, k)
			case 4:
				r.SetProperty(k, v)
				r.Property(k)
			case 5:
				r.SetHeaders(m, []function.HeaderPair{{Key: k, Value: v}})
			case 6:
				r.VisitHeaders(m, func(_, _ []byte) {})
				r.HeaderCount(m)
			case 7:
				r.Buffer(function.BufferType(len(k) % 8))
			case 8:
				r.SetBuffer(function.BufferType(len(k)%8), v)
			case 9:
				r.SendLocalReply(len(k)*37, k, v, []function.HeaderPair{{Key: k, Value: v}})
			case 10:
				r.Log(function.LogLevel(len(k)%7), v)
			case 11:
				r.Property([]byte(function.PropSource))
			}
		}
		var out bytes.Buffer
		if err := ctx.Request.Header.Write(bufio.NewWriter(&out)); err != nil {
			t.Fatalf("the request no longer writes: %v", err)
		}
	})
}
