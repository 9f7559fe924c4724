package limit

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

var (
	hdrLimit      = []byte("RateLimit-Limit")
	hdrRemaining  = []byte("RateLimit-Remaining")
	hdrReset      = []byte("RateLimit-Reset")
	hdrRetryAfter = []byte("Retry-After")
)

// WriteHeaders sets the response's RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (whole seconds, rounded up) when a rate or quota applied, and
// Retry-After (whole seconds, at least 1) when the request was refused. It allocates
// nothing.
func (d *Decision) WriteHeaders(h *fasthttp.ResponseHeader) {
	var b [20]byte
	if d.Limit > 0 {
		h.SetCanonical(hdrLimit, strconv.AppendInt(b[:0], d.Limit, 10))
		h.SetCanonical(hdrRemaining, strconv.AppendInt(b[:0], d.Remaining, 10))
		h.SetCanonical(hdrReset, strconv.AppendInt(b[:0], seconds(d.Reset), 10))
	}
	if !d.Allowed {
		h.SetCanonical(hdrRetryAfter, strconv.AppendInt(b[:0], max(1, seconds(d.RetryAfter)), 10))
	}
}

// seconds rounds up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
