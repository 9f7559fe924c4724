// Package abi is the guest side of proxy-wasm 0.2.1 for the test guests, written from the
// specification alone (no SDK): the host calls they import, the callbacks they export,
// and hooks a guest's main package sets in init.
package abi

import (
	"encoding/binary"
	"unsafe"
)

const (
	RequestHeaders  = 0
	ResponseHeaders = 2
	CalloutHeaders  = 6
	CalloutBody     = 4
	RequestBody     = 0
	ResponseBody    = 1

	Continue = 0
	Pause    = 1

	LogInfo = 2
	LogWarn = 3

	StatusOK = 0
)

// Hooks a guest sets in init; nil ones do nothing and continue.
var (
	OnConfigure       func(config []byte) bool
	OnRequestHeaders  func(n uint32, endOfStream bool) uint32
	OnRequestBody     func(size uint32, endOfStream bool) uint32
	OnResponseHeaders func(n uint32, endOfStream bool) uint32
	OnResponseBody    func(size uint32, endOfStream bool) uint32
	OnCalloutResponse func(token, headers, bodySize, trailers uint32)
	OnDelete          func()
)

// Context is the id of the context whose callback runs.
var Context uint32

//go:wasmimport env proxy_log
func proxyLog(level uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(t, start, max uint32, retPtr, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(t, start, size uint32, p unsafe.Pointer, s uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(m uint32, kp unsafe.Pointer, ks uint32, retPtr, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(m uint32, kp unsafe.Pointer, ks uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(m uint32, kp unsafe.Pointer, ks uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(pp unsafe.Pointer, ps uint32, retPtr, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(pp unsafe.Pointer, ps uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, dp unsafe.Pointer, ds uint32, bp unsafe.Pointer, bs uint32, hp unsafe.Pointer, hs uint32, grpc int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, us uint32, hp unsafe.Pointer, hs uint32, bp unsafe.Pointer, bs uint32, tp unsafe.Pointer, ts uint32, timeout uint32, retToken unsafe.Pointer) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(stream uint32) uint32

// The host's copies live here until the guest takes them: Go's collector must not free
// memory the host is about to fill.
var kept = map[uint32][]byte{}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) uint32 {
	b := make([]byte, size+1) // +1: a zero-size request still gets its own address
	p := uint32(uintptr(unsafe.Pointer(&b[0])))
	kept[p] = b
	return p
}

func take(p, size uint32) []byte {
	b, ok := kept[p]
	if !ok {
		return nil
	}
	delete(kept, p)
	return b[:size]
}

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 { return 1 }

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	if OnConfigure == nil {
		return 1
	}
	var p, s uint32
	var config []byte
	if size > 0 && proxyGetBufferBytes(7, 0, size, unsafe.Pointer(&p), unsafe.Pointer(&s)) == StatusOK {
		config = take(p, s)
	}
	if OnConfigure(config) {
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n, eos uint32) uint32 {
	Context = id
	if OnRequestHeaders == nil {
		return Continue
	}
	return OnRequestHeaders(n, eos != 0)
}

//go:wasmexport proxy_on_request_body
func onRequestBody(id, size, eos uint32) uint32 {
	Context = id
	if OnRequestBody == nil {
		return Continue
	}
	return OnRequestBody(size, eos != 0)
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n, eos uint32) uint32 {
	Context = id
	if OnResponseHeaders == nil {
		return Continue
	}
	return OnResponseHeaders(n, eos != 0)
}

//go:wasmexport proxy_on_response_body
func onResponseBody(id, size, eos uint32) uint32 {
	Context = id
	if OnResponseBody == nil {
		return Continue
	}
	return OnResponseBody(size, eos != 0)
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(id, token, headers, bodySize, trailers uint32) {
	if OnCalloutResponse != nil {
		OnCalloutResponse(token, headers, bodySize, trailers)
	}
}

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 { return 1 }

//go:wasmexport proxy_on_log
func onLog(id uint32) {}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	Context = id
	if OnDelete != nil {
		OnDelete()
	}
}

// Log writes a line to the tenant's function log.
func Log(level uint32, msg string) {
	b := []byte(msg)
	proxyLog(level, ptr(b), uint32(len(b)))
}

// Header returns the first value of key in map m.
func Header(m uint32, key string) (string, bool) {
	k := []byte(key)
	var p, s uint32
	if proxyGetHeaderMapValue(m, ptr(k), uint32(len(k)), unsafe.Pointer(&p), unsafe.Pointer(&s)) != StatusOK {
		return "", false
	}
	return string(take(p, s)), true
}

// AddHeader appends a header to map m.
func AddHeader(m uint32, key, value string) bool {
	k, v := []byte(key), []byte(value)
	return proxyAddHeaderMapValue(m, ptr(k), uint32(len(k)), ptr(v), uint32(len(v))) == StatusOK
}

// ReplaceHeader sets a header of map m.
func ReplaceHeader(m uint32, key, value string) bool {
	k, v := []byte(key), []byte(value)
	return proxyReplaceHeaderMapValue(m, ptr(k), uint32(len(k)), ptr(v), uint32(len(v))) == StatusOK
}

func path(segments []string) []byte {
	var b []byte
	for i, s := range segments {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, s...)
	}
	return b
}

// Property reads a property by its path segments.
func Property(segments ...string) ([]byte, bool) {
	pp := path(segments)
	var p, s uint32
	if proxyGetProperty(ptr(pp), uint32(len(pp)), unsafe.Pointer(&p), unsafe.Pointer(&s)) != StatusOK {
		return nil, false
	}
	return take(p, s), true
}

// SetProperty sets a property by its path segments.
func SetProperty(value []byte, segments ...string) bool {
	pp := path(segments)
	return proxySetProperty(ptr(pp), uint32(len(pp)), ptr(value), uint32(len(value))) == StatusOK
}

// Body reads the request (0) or response (1) body.
func Body(t, size uint32) []byte {
	var p, s uint32
	if proxyGetBufferBytes(t, 0, size, unsafe.Pointer(&p), unsafe.Pointer(&s)) != StatusOK {
		return nil
	}
	return take(p, s)
}

func serialize(headers [][2]string) []byte {
	var h []byte
	h = binary.LittleEndian.AppendUint32(h, uint32(len(headers)))
	for _, kv := range headers {
		h = binary.LittleEndian.AppendUint32(h, uint32(len(kv[0])))
		h = binary.LittleEndian.AppendUint32(h, uint32(len(kv[1])))
	}
	for _, kv := range headers {
		h = append(append(append(append(h, kv[0]...), 0), kv[1]...), 0)
	}
	return h
}

// HTTPCall sends a request to upstream; the answer comes to OnCalloutResponse.
func HTTPCall(upstream string, headers [][2]string, body []byte, timeoutMS uint32) (uint32, bool) {
	u, h := []byte(upstream), serialize(headers)
	var token uint32
	ok := proxyHTTPCall(ptr(u), uint32(len(u)), ptr(h), uint32(len(h)), ptr(body), uint32(len(body)), nil, 0, timeoutMS, unsafe.Pointer(&token)) == StatusOK
	return token, ok
}

// ContinueRequest resumes a request paused for a callout.
func ContinueRequest() { proxyContinueStream(0) }

// SetBody replaces the request (0) or response (1) body.
func SetBody(t uint32, body []byte) bool {
	return proxySetBufferBytes(t, 0, 0xffffffff, ptr(body), uint32(len(body))) == StatusOK
}

// Reply answers the request from the guest.
func Reply(status uint32, body string, headers ...[2]string) {
	h := serialize(headers)
	b := []byte(body)
	d := []byte("function")
	proxySendLocalResponse(status, ptr(d), uint32(len(d)), ptr(b), uint32(len(b)), ptr(h), uint32(len(h)), -1)
}
