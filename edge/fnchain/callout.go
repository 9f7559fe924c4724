package fnchain

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/function"
)

// maxCalloutBody bounds a callout's answer: it is handed whole to the guest.
const maxCalloutBody = 1 << 20

// NewCallout makes guests' HTTP callouts (proxy_http_call) with dial, which applies the
// operator's address rules. The guest's upstream argument (Envoy's cluster name) is the
// target: "host:port" or "http(s)://host[:port]"; the pseudo-headers :method, :path and
// :authority give the rest, as in Envoy.
func NewCallout(dial fasthttp.DialFuncWithTimeout) func(ctx context.Context, cr *function.CalloutRequest) (*function.CalloutResponse, error) {
	c := &fasthttp.Client{
		DialTimeout:                   dial,
		MaxResponseBodySize:           maxCalloutBody,
		MaxConnsPerHost:               64,
		MaxIdleConnDuration:           30 * time.Second,
		DisableHeaderNamesNormalizing: true,
		NoDefaultUserAgentHeader:      true,
	}
	return func(ctx context.Context, cr *function.CalloutRequest) (*function.CalloutResponse, error) {
		target := cr.Upstream
		scheme := "http://"
		switch {
		case strings.HasPrefix(target, "https://"):
			scheme, target = "https://", target[len("https://"):]
		case strings.HasPrefix(target, "http://"):
			target = target[len("http://"):]
		}
		target = strings.TrimSuffix(target, "/")
		if target == "" || strings.ContainsAny(target, "/?#@ ") {
			return nil, errors.New("callout upstream must be host:port or http(s)://host[:port]")
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		method, path, authority := "GET", "/", ""
		for _, h := range cr.Headers {
			switch string(h.Key) {
			case ":method":
				method = string(h.Value)
			case ":path":
				path = string(h.Value)
			case ":authority":
				authority = string(h.Value)
			default:
				if len(h.Key) > 0 && h.Key[0] != ':' {
					req.Header.AddBytesKV(h.Key, h.Value)
				}
			}
		}
		if !strings.HasPrefix(path, "/") {
			return nil, errors.New("callout :path must start with /")
		}
		req.SetRequestURI(scheme + target + path)
		req.Header.SetMethod(method)
		if authority != "" {
			req.UseHostHeader = true
			req.Header.SetHost(authority)
		}
		req.SetBody(cr.Body)
		timeout := cr.Timeout
		if d, ok := ctx.Deadline(); ok && (timeout <= 0 || time.Until(d) < timeout) {
			timeout = time.Until(d)
		}
		if timeout <= 0 || timeout > 10*time.Second {
			timeout = 10 * time.Second
		}
		if err := c.DoTimeout(req, resp, timeout); err != nil {
			return nil, err
		}
		out := &function.CalloutResponse{Body: append([]byte(nil), resp.Body()...)}
		out.Headers = append(out.Headers, function.HeaderPair{Key: []byte(":status"), Value: strconv.AppendInt(nil, int64(resp.StatusCode()), 10)})
		for k, v := range resp.Header.All() {
			out.Headers = append(out.Headers, function.HeaderPair{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		}
		return out, nil
	}
}
