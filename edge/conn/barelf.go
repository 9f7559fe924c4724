package conn

// A request head whose lines end in a bare LF.
//
// RFC 9112 (section 2.2) lets a server take a bare LF as the end of a line of the head,
// and the edge does. fasthttp, which reads the heads, takes bare-LF lines only once a
// CRLFCRLF has arrived after them: a head that ends in a bare-LF blank line with nothing
// after it (a client that sends one request and waits) is not framed until more bytes
// come or the read timeout closes the connection. So the first head of a plain connection
// has its bare LFs made CRLF as it is read, up to its blank line: the bytes there are a
// head whatever reads them, and the head keeps its lines and its end. Later heads on the
// connection are left alone, since only fasthttp knows where a body ends and the next
// head begins; rewriting bytes that were a body would shift the request framing.

// maxLFHead bounds the bytes watched for the first head's end; fasthttp refuses a longer
// head anyway (ReadBufferSize).
const maxLFHead = 64 << 10

// lfHead is the first head's state, across reads.
type lfHead struct {
	active  bool // still inside the connection's first head
	lineLen int  // bytes of the current line other than CR
	cr      bool // the last byte was CR
	seen    int
	pending []byte // rewritten bytes that did not fit the reader's buffer
}

// rewrite makes the bare LFs among b[:n] CRLF while the head lasts, returning how many
// bytes of b now hold data; what does not fit in b waits in h.pending.
func (h *lfHead) rewrite(b []byte, n int) int {
	bare, end, startCR := 0, n, h.cr
	for i := 0; i < n; i++ {
		c := b[i]
		h.seen++
		switch {
		case c == '\n':
			if !h.cr {
				bare++
			}
			h.cr = false
			if h.lineLen == 0 {
				h.active, end = false, i+1
			}
			h.lineLen = 0
		case c == '\r':
			if h.cr {
				h.lineLen++
			}
			h.cr = true
		default:
			if h.cr {
				h.lineLen++
			}
			h.cr = false
			h.lineLen++
		}
		if !h.active {
			break
		}
		if h.seen >= maxLFHead {
			h.active, end = false, i+1
			break
		}
	}
	if bare == 0 {
		return n
	}
	out := make([]byte, 0, n+bare)
	prevCR := startCR
	for i := 0; i < end; i++ {
		c := b[i]
		if c == '\n' && !prevCR {
			out = append(out, '\r')
		}
		prevCR = c == '\r'
		out = append(out, c)
	}
	out = append(out, b[end:n]...)
	k := copy(b, out)
	if k < len(out) {
		h.pending = out[k:]
	}
	return k
}
