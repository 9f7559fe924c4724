package functiontest

import (
	"bytes"
	"sync"

	"tollgate/edge/function"
)

// HTTP is a plain request/response for function.HTTP: header maps as ordered pairs,
// bodies, properties. Tests fill it, run a Call, and read what the guest changed.
type HTTP struct {
	Maps       [4][]Pair // function.RequestHeaders … ResponseTrailers
	HaveResp   bool      // the response maps exist (after the upstream answered)
	ReqBody    []byte
	RespBody   []byte
	Properties map[string]string // by NUL-joined path, e.g. function.PropConsumer

	Reply *LocalReply // the guest's local reply, if any

	mu   sync.Mutex
	Logs []string // "level: message"
}

// Pair is a header.
type Pair struct{ Key, Value string }

// LocalReply is what a guest answered with.
type LocalReply struct {
	Status  int
	Details string
	Body    string
	Headers []Pair
}

// NewHTTP is a GET of path with the pseudo-headers Envoy gives filters and extra headers
// as key, value, key, value…
func NewHTTP(method, path string, kv ...string) *HTTP {
	h := &HTTP{Properties: map[string]string{
		function.PropMethod: method,
		function.PropPath:   path,
	}}
	h.Maps[function.RequestHeaders] = []Pair{{":method", method}, {":path", path}, {":authority", "api.test"}, {":scheme", "https"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Maps[function.RequestHeaders] = append(h.Maps[function.RequestHeaders], Pair{kv[i], kv[i+1]})
	}
	return h
}

// Respond makes the response maps exist, with status and headers key, value…
func (h *HTTP) Respond(status string, kv ...string) {
	h.HaveResp = true
	h.Maps[function.ResponseHeaders] = []Pair{{":status", status}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Maps[function.ResponseHeaders] = append(h.Maps[function.ResponseHeaders], Pair{kv[i], kv[i+1]})
	}
}

// Get returns the first value of key in map m.
func (h *HTTP) Get(m function.MapType, key string) (string, bool) {
	for _, p := range h.Maps[m] {
		if bytes.EqualFold([]byte(p.Key), []byte(key)) {
			return p.Value, true
		}
	}
	return "", false
}

func (h *HTTP) has(m function.MapType) bool {
	if m > function.ResponseTrailers {
		return false
	}
	return m < function.ResponseHeaders || h.HaveResp
}

func (h *HTTP) HeaderValue(m function.MapType, key []byte) ([]byte, bool) {
	if !h.has(m) {
		return nil, false
	}
	for _, p := range h.Maps[m] {
		if bytes.EqualFold([]byte(p.Key), key) {
			return []byte(p.Value), true
		}
	}
	return nil, false
}

func (h *HTTP) HeaderCount(m function.MapType) int {
	if !h.has(m) {
		return 0
	}
	return len(h.Maps[m])
}

func (h *HTTP) VisitHeaders(m function.MapType, fn func(k, v []byte)) bool {
	if !h.has(m) {
		return false
	}
	for _, p := range h.Maps[m] {
		fn([]byte(p.Key), []byte(p.Value))
	}
	return true
}

func (h *HTTP) SetHeaders(m function.MapType, pairs []function.HeaderPair) bool {
	if !h.has(m) {
		return false
	}
	h.Maps[m] = h.Maps[m][:0]
	for _, p := range pairs {
		h.Maps[m] = append(h.Maps[m], Pair{string(p.Key), string(p.Value)})
	}
	return true
}

func (h *HTTP) AddHeader(m function.MapType, k, v []byte) bool {
	if !h.has(m) {
		return false
	}
	h.Maps[m] = append(h.Maps[m], Pair{string(k), string(v)})
	return true
}

func (h *HTTP) ReplaceHeader(m function.MapType, k, v []byte) bool {
	if !h.has(m) {
		return false
	}
	h.RemoveHeader(m, k)
	return h.AddHeader(m, k, v)
}

func (h *HTTP) RemoveHeader(m function.MapType, k []byte) bool {
	if !h.has(m) {
		return false
	}
	out := h.Maps[m][:0]
	for _, p := range h.Maps[m] {
		if !bytes.EqualFold([]byte(p.Key), k) {
			out = append(out, p)
		}
	}
	h.Maps[m] = out
	return true
}

func (h *HTTP) Buffer(b function.BufferType) ([]byte, bool) {
	switch b {
	case function.RequestBody:
		return h.ReqBody, true
	case function.ResponseBody:
		return h.RespBody, h.HaveResp
	}
	return nil, false
}

func (h *HTTP) SetBuffer(b function.BufferType, data []byte) bool {
	switch b {
	case function.RequestBody:
		h.ReqBody = append([]byte(nil), data...)
	case function.ResponseBody:
		h.RespBody = append([]byte(nil), data...)
	default:
		return false
	}
	return true
}

func (h *HTTP) Property(path []byte) ([]byte, bool) {
	v, ok := h.Properties[string(path)]
	return []byte(v), ok
}

func (h *HTTP) SetProperty(path, value []byte) bool {
	if string(path) != function.PropConsumer {
		return false
	}
	h.Properties[function.PropConsumer] = string(value)
	return true
}

func (h *HTTP) SendLocalReply(status int, details, body []byte, headers []function.HeaderPair) {
	r := &LocalReply{Status: status, Details: string(details), Body: string(body)}
	for _, p := range headers {
		r.Headers = append(r.Headers, Pair{string(p.Key), string(p.Value)})
	}
	h.Reply = r
}

func (h *HTTP) Log(level function.LogLevel, msg []byte) {
	h.mu.Lock()
	h.Logs = append(h.Logs, level.String()+": "+string(msg))
	h.mu.Unlock()
}

// LogLines returns the lines logged so far.
func (h *HTTP) LogLines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.Logs...)
}

var _ function.HTTP = (*HTTP)(nil)
