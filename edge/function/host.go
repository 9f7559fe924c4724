package function

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Bounds on what a guest may hand the host in one host call or one request. A guest past
// them made a bad host call: the request fails and the instance is dropped.
const (
	maxArgBytes    = 16 << 20 // one pointer/length argument (a body, a header map)
	maxHeaderBytes = 1 << 20  // header bytes a guest may add or set during one request
	maxPairs       = 4096     // pairs in one serialised map
	maxLogBytes    = 4096     // a log line is cut here
	maxCallouts    = 8        // HTTP callouts per request
	maxCalloutTime = 30 * time.Second
)

type hostFunc struct {
	name string
	s    sig
	fn   api.GoModuleFunc
}

func unimplemented() api.GoModuleFunc {
	return func(_ context.Context, _ api.Module, st []uint64) { st[0] = uint64(statusUnimplemented) }
}

func unsupported(name string, params ...api.ValueType) hostFunc {
	return hostFunc{name, sigOf(1, params...), unimplemented()}
}

// envFuncs is the host side of proxy-wasm 0.2.1 (and the 0.2.0 names SDKs still import).
var envFuncs = []hostFunc{
	{"proxy_log", sigOf(1, i32, i32, i32), hostLog},
	{"proxy_get_log_level", sigOf(1, i32), hostGetLogLevel},
	{"proxy_get_current_time_nanoseconds", sigOf(1, i32), hostCurrentTime},
	{"proxy_set_tick_period_milliseconds", sigOf(1, i32), hostOK},
	{"proxy_get_property", sigOf(1, i32, i32, i32, i32), hostGetProperty},
	{"proxy_set_property", sigOf(1, i32, i32, i32, i32), hostSetProperty},
	{"proxy_get_buffer_bytes", sigOf(1, i32, i32, i32, i32, i32), hostGetBuffer},
	{"proxy_set_buffer_bytes", sigOf(1, i32, i32, i32, i32, i32), hostSetBuffer},
	{"proxy_get_configuration", sigOf(1, i32, i32), hostGetConfiguration},
	{"proxy_get_header_map_value", sigOf(1, i32, i32, i32, i32, i32), hostGetHeader},
	{"proxy_get_header_map_pairs", sigOf(1, i32, i32, i32), hostGetHeaders},
	{"proxy_set_header_map_pairs", sigOf(1, i32, i32, i32), hostSetHeaders},
	{"proxy_add_header_map_value", sigOf(1, i32, i32, i32, i32, i32), hostAddHeader},
	{"proxy_replace_header_map_value", sigOf(1, i32, i32, i32, i32, i32), hostReplaceHeader},
	{"proxy_remove_header_map_value", sigOf(1, i32, i32, i32), hostRemoveHeader},
	{"proxy_get_header_map_size", sigOf(1, i32, i32), hostHeaderMapSize},
	{"proxy_send_local_response", sigOf(1, i32, i32, i32, i32, i32, i32, i32, i32), hostLocalResponse},
	{"proxy_continue_stream", sigOf(1, i32), hostContinueStream},
	{"proxy_continue_request", sigOf(1), hostContinueRequest},
	{"proxy_continue_response", sigOf(1), hostContinueResponse},
	{"proxy_close_stream", sigOf(1, i32), hostCloseStream},
	{"proxy_clear_route_cache", sigOf(1), hostOK},
	{"proxy_http_call", sigOf(1, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32), hostHTTPCall},
	{"proxy_set_effective_context", sigOf(1, i32), hostSetEffectiveContext},
	{"proxy_done", sigOf(1), hostOK},

	unsupported("proxy_get_shared_data", i32, i32, i32, i32, i32),
	unsupported("proxy_set_shared_data", i32, i32, i32, i32, i32),
	unsupported("proxy_register_shared_queue", i32, i32, i32),
	unsupported("proxy_resolve_shared_queue", i32, i32, i32, i32, i32),
	unsupported("proxy_dequeue_shared_queue", i32, i32, i32),
	unsupported("proxy_enqueue_shared_queue", i32, i32, i32),
	unsupported("proxy_grpc_call", i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32),
	unsupported("proxy_grpc_stream", i32, i32, i32, i32, i32, i32, i32, i32, i32),
	unsupported("proxy_grpc_send", i32, i32, i32, i32),
	unsupported("proxy_grpc_cancel", i32),
	unsupported("proxy_grpc_close", i32),
	unsupported("proxy_get_status", i32, i32, i32),
	unsupported("proxy_define_metric", i32, i32, i32, i32),
	unsupported("proxy_increment_metric", i32, i64),
	unsupported("proxy_record_metric", i32, i64),
	unsupported("proxy_get_metric", i32, i32),
	unsupported("proxy_call_foreign_function", i32, i32, i32, i32, i32, i32),
}

// WASI errno values.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNosys   = 52
)

// wasiFuncs is the part of WASI preview 1 that SDK-built guests link against: output to
// the tenant's log, clocks, randomness, an empty environment. No files, no sockets.
var wasiFuncs = []hostFunc{
	{"fd_write", sigOf(1, i32, i32, i32, i32), wasiFdWrite},
	{"clock_time_get", sigOf(1, i32, i64, i32), wasiClockTimeGet},
	{"clock_res_get", sigOf(1, i32, i32), wasiClockResGet},
	{"random_get", sigOf(1, i32, i32), wasiRandomGet},
	{"proc_exit", sigOf(0, i32), wasiProcExit},
	{"sched_yield", sigOf(1), wasiOK},
	{"environ_sizes_get", sigOf(1, i32, i32), wasiSizesGet},
	{"environ_get", sigOf(1, i32, i32), wasiOK},
	{"args_sizes_get", sigOf(1, i32, i32), wasiSizesGet},
	{"args_get", sigOf(1, i32, i32), wasiOK},
	{"fd_close", sigOf(1, i32), wasiBadf},
	{"fd_fdstat_get", sigOf(1, i32, i32), wasiBadf},
	{"fd_fdstat_set_flags", sigOf(1, i32, i32), wasiBadf},
	{"fd_seek", sigOf(1, i32, i64, i32, i32), wasiBadf},
	{"fd_read", sigOf(1, i32, i32, i32, i32), wasiBadf},
	{"fd_prestat_get", sigOf(1, i32, i32), wasiBadf},
	{"fd_prestat_dir_name", sigOf(1, i32, i32, i32), wasiBadf},
	{"poll_oneoff", sigOf(1, i32, i32, i32, i32), wasiNosys},
}

// hostSignatures is what Validate holds imports to.
var hostSignatures = map[string]map[string]sig{}

func init() {
	for mod, fns := range map[string][]hostFunc{"env": envFuncs, "wasi_snapshot_preview1": wasiFuncs} {
		hostSignatures[mod] = map[string]sig{}
		for _, f := range fns {
			hostSignatures[mod][f.name] = f.s
		}
	}
}

func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	for mod, fns := range map[string][]hostFunc{"env": envFuncs, "wasi_snapshot_preview1": wasiFuncs} {
		b := rt.NewHostModuleBuilder(mod)
		for _, f := range fns {
			b.NewFunctionBuilder().WithGoModuleFunction(f.fn, f.s.params, f.s.results).Export(f.name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return err
		}
	}
	return nil
}

type instKey struct{}

// instCtx is the context guest calls run with. wazero looks a key up in it on every call
// into the guest and every host call looks the instance up: a context of its own answers
// both without walking a chain of contexts and comparing keys through interfaces.
type instCtx struct {
	context.Context // Background: no deadline, never done
	in              *instance
}

func (c *instCtx) Value(key any) any {
	if _, ok := key.(instKey); ok {
		return c.in
	}
	return nil
}

func instanceOf(ctx context.Context) *instance {
	if c, ok := ctx.(*instCtx); ok {
		return c.in
	}
	in, _ := ctx.Value(instKey{}).(*instance)
	return in
}

func u32(v uint64) uint32 { return uint32(v) }

func hostOK(_ context.Context, _ api.Module, st []uint64) { st[0] = uint64(statusOK) }

func hostLog(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	level, ptr, size := LogLevel(u32(st[0])), u32(st[1]), u32(st[2])
	msg, ok := in.read(ptr, size)
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	in.log(level, msg)
	st[0] = uint64(statusOK)
}

func hostGetLogLevel(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	st[0] = uint64(in.writeU32(u32(st[0]), uint32(minLogLevel)))
}

func hostCurrentTime(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	ptr := u32(st[0])
	if !in.mem.WriteUint64Le(ptr, uint64(time.Now().UnixNano())) {
		in.fail("proxy_get_current_time_nanoseconds: pointer %#x out of bounds", ptr)
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	st[0] = uint64(statusOK)
}

func hostGetProperty(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	path, ok := in.read(u32(st[0]), u32(st[1]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	for len(path) > 0 && path[len(path)-1] == 0 {
		path = path[:len(path)-1]
	}
	var value []byte
	switch string(path) {
	case PropTenant:
		value, ok = in.f.tenantB, true
	case PropPluginName:
		value, ok = in.f.nameB, true
	case PropPluginRoot:
		value, ok = nil, true
	default:
		if in.call == nil {
			st[0] = uint64(statusNotFound)
			return
		}
		value, ok = in.call.h.Property(path)
	}
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(in.give(value, u32(st[2]), u32(st[3])))
}

func hostSetProperty(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	path, ok := in.read(u32(st[0]), u32(st[1]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	value, ok := in.read(u32(st[2]), u32(st[3]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	for len(path) > 0 && path[len(path)-1] == 0 {
		path = path[:len(path)-1]
	}
	if in.call == nil || !in.call.h.SetProperty(path, value) {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(statusOK)
}

// buffer returns the bytes of buffer t as the guest sees them now.
func (in *instance) buffer(t BufferType) ([]byte, bool) {
	switch t {
	case PluginConfiguration:
		return in.f.config, true
	case VMConfiguration:
		return nil, true
	case CalloutBody:
		if in.call == nil || in.call.calloutResp == nil {
			return nil, false
		}
		return in.call.calloutResp.Body, true
	case RequestBody, ResponseBody:
		if in.call == nil {
			return nil, false
		}
		return in.call.h.Buffer(t)
	}
	return nil, false
}

func hostGetBuffer(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	t, start, maxSize := BufferType(u32(st[0])), u32(st[1]), u32(st[2])
	buf, ok := in.buffer(t)
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	if uint64(start) > uint64(len(buf)) {
		st[0] = uint64(statusBadArgument)
		return
	}
	buf = buf[start:]
	if uint64(len(buf)) > uint64(maxSize) {
		buf = buf[:maxSize]
	}
	st[0] = uint64(in.give(buf, u32(st[3]), u32(st[4])))
}

func hostGetConfiguration(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	st[0] = uint64(in.give(in.f.config, u32(st[0]), u32(st[1])))
}

func hostSetBuffer(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	t, start, size := BufferType(u32(st[0])), u32(st[1]), u32(st[2])
	data, ok := in.read(u32(st[3]), u32(st[4]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if (t != RequestBody && t != ResponseBody) || in.call == nil {
		st[0] = uint64(statusBadArgument)
		return
	}
	old, ok := in.call.h.Buffer(t)
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	// Envoy's semantics: bytes [start, start+size) of the buffer are replaced by data;
	// a start past the end appends.
	s := min(uint64(start), uint64(len(old)))
	e := min(s+uint64(size), uint64(len(old)))
	if s+uint64(len(data))+uint64(len(old))-e > maxArgBytes {
		in.fail("proxy_set_buffer_bytes: a body over %d bytes", maxArgBytes)
		st[0] = uint64(statusBadArgument)
		return
	}
	nb := make([]byte, 0, s+uint64(len(data))+uint64(len(old))-e)
	nb = append(append(append(nb, old[:s]...), data...), old[e:]...)
	if !in.call.h.SetBuffer(t, nb) {
		st[0] = uint64(statusBadArgument)
		return
	}
	st[0] = uint64(statusOK)
}

// headerMap answers for the maps the host holds itself (a callout's answer); ok is false
// for the maps HTTP holds.
func (c *Call) hostMap(m MapType) (pairs []HeaderPair, own bool) {
	switch m {
	case CalloutHeaders:
		if c.calloutResp != nil {
			return c.calloutResp.Headers, true
		}
		return nil, true
	case CalloutTrailers:
		if c.calloutResp != nil {
			return c.calloutResp.Trailers, true
		}
		return nil, true
	case GrpcInitialMetadata, GrpcTrailingMetadata:
		return nil, true
	}
	return nil, false
}

func (c *Call) visit(m MapType, fn func(k, v []byte)) bool {
	if pairs, own := c.hostMap(m); own {
		for _, p := range pairs {
			fn(p.Key, p.Value)
		}
		return true
	}
	if m > ResponseTrailers {
		return false
	}
	return c.h.VisitHeaders(m, fn)
}

func hostGetHeader(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	m := MapType(u32(st[0]))
	key, ok := in.read(u32(st[1]), u32(st[2]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if in.call == nil {
		st[0] = uint64(statusNotFound)
		return
	}
	c := in.call
	var value []byte
	if pairs, own := c.hostMap(m); own {
		ok = false
		for _, p := range pairs {
			if equalFold(p.Key, key) {
				value, ok = p.Value, true
				break
			}
		}
	} else if m <= ResponseTrailers {
		value, ok = c.h.HeaderValue(m, key)
	}
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(in.give(value, u32(st[3]), u32(st[4])))
}

func hostGetHeaders(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	m := MapType(u32(st[0]))
	if in.call == nil {
		st[0] = uint64(statusNotFound)
		return
	}
	c := in.call
	size, ok := c.measure(m)
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	if size > maxArgBytes {
		st[0] = uint64(statusInternalFailure)
		return
	}
	ptr, view, ok := in.alloc(uint32(size))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	binary.LittleEndian.PutUint32(view, uint32(c.ser.n))
	c.ser.view, c.ser.i, c.ser.off = view, 0, 4+8*c.ser.n
	c.visit(m, c.fillFn)
	if !in.mem.WriteUint32Le(u32(st[1]), ptr) || !in.mem.WriteUint32Le(u32(st[2]), uint32(size)) {
		in.fail("proxy_get_header_map_pairs: return pointer out of bounds")
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	st[0] = uint64(statusOK)
}

// measure counts map m's pairs into c.ser and returns the size of its serialized form;
// false when the request has no such map.
func (c *Call) measure(m MapType) (int, bool) {
	c.ser = serializer{}
	if !c.visit(m, c.countFn) {
		return 0, false
	}
	return 4 + 8*c.ser.n + c.ser.bytes, true
}

// serializer writes a header map in proxy-wasm's layout straight into guest memory:
// count, then (key size, value size) pairs, then each key and value followed by a NUL.
type serializer struct {
	n, bytes int
	view     []byte
	i, off   int
}

func (c *Call) count(k, v []byte) {
	c.ser.n++
	c.ser.bytes += len(k) + len(v) + 2
}

func (c *Call) fill(k, v []byte) {
	s := &c.ser
	if s.i >= s.n || s.off+len(k)+len(v)+2 > len(s.view) {
		return // the map changed between the passes: cannot happen on one goroutine
	}
	binary.LittleEndian.PutUint32(s.view[4+8*s.i:], uint32(len(k)))
	binary.LittleEndian.PutUint32(s.view[8+8*s.i:], uint32(len(v)))
	s.off += copy(s.view[s.off:], k)
	s.view[s.off] = 0
	s.off++
	s.off += copy(s.view[s.off:], v)
	s.view[s.off] = 0
	s.off++
	s.i++
}

// parseMap reads a serialised map; the pairs alias b.
func parseMap(b []byte, dst []HeaderPair) ([]HeaderPair, bool) {
	dst = dst[:0]
	if len(b) == 0 {
		return dst, true
	}
	if len(b) < 4 {
		return dst, false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > maxPairs || 4+8*n > uint64(len(b)) {
		return dst, false
	}
	off := 4 + 8*n
	for i := uint64(0); i < n; i++ {
		ks := uint64(binary.LittleEndian.Uint32(b[4+8*i:]))
		vs := uint64(binary.LittleEndian.Uint32(b[8+8*i:]))
		if off+ks+1+vs+1 > uint64(len(b)) {
			return dst, false
		}
		k := b[off : off+ks]
		off += ks + 1
		v := b[off : off+vs]
		off += vs + 1
		dst = append(dst, HeaderPair{Key: k, Value: v})
	}
	return dst, true
}

// writableMap: the maps a guest may change through HTTP.
func writableMap(m MapType) bool { return m <= ResponseTrailers }

func hostSetHeaders(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	m := MapType(u32(st[0]))
	b, ok := in.read(u32(st[1]), u32(st[2]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if in.call == nil || !writableMap(m) {
		st[0] = uint64(statusBadArgument)
		return
	}
	c := in.call
	if !c.spendHeaders(len(b)) {
		st[0] = uint64(statusBadArgument)
		return
	}
	c.pairs, ok = parseMap(b, c.pairs)
	if !ok {
		st[0] = uint64(statusSerializationFailed)
		return
	}
	if !c.h.SetHeaders(m, c.pairs) {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(statusOK)
}

func (c *Call) spendHeaders(n int) bool {
	c.headerBytes += n
	if c.headerBytes > maxHeaderBytes {
		c.in.fail("headers: the function set more than %d bytes of headers in one request", maxHeaderBytes)
		return false
	}
	return true
}

func headerOp(ctx context.Context, st []uint64, op func(h HTTP, m MapType, k, v []byte) bool, withValue bool) {
	in := instanceOf(ctx)
	m := MapType(u32(st[0]))
	key, ok := in.read(u32(st[1]), u32(st[2]))
	if !ok {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	var value []byte
	if withValue {
		if value, ok = in.read(u32(st[3]), u32(st[4])); !ok {
			st[0] = uint64(statusInvalidMemoryAccess)
			return
		}
	}
	if in.call == nil || !writableMap(m) {
		st[0] = uint64(statusBadArgument)
		return
	}
	if !in.call.spendHeaders(len(key) + len(value)) {
		st[0] = uint64(statusBadArgument)
		return
	}
	if !op(in.call.h, m, key, value) {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(statusOK)
}

func hostAddHeader(ctx context.Context, _ api.Module, st []uint64) {
	headerOp(ctx, st, func(h HTTP, m MapType, k, v []byte) bool { return h.AddHeader(m, k, v) }, true)
}

func hostReplaceHeader(ctx context.Context, _ api.Module, st []uint64) {
	headerOp(ctx, st, func(h HTTP, m MapType, k, v []byte) bool { return h.ReplaceHeader(m, k, v) }, true)
}

func hostRemoveHeader(ctx context.Context, _ api.Module, st []uint64) {
	headerOp(ctx, st, func(h HTTP, m MapType, k, _ []byte) bool { return h.RemoveHeader(m, k) }, false)
}

func hostHeaderMapSize(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	m := MapType(u32(st[0]))
	if in.call == nil {
		st[0] = uint64(statusNotFound)
		return
	}
	size, ok := in.call.measure(m)
	if !ok {
		st[0] = uint64(statusNotFound)
		return
	}
	st[0] = uint64(in.writeU32(u32(st[1]), uint32(size)))
}

func hostLocalResponse(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	code := u32(st[0])
	details, ok1 := in.read(u32(st[1]), u32(st[2]))
	body, ok2 := in.read(u32(st[3]), u32(st[4]))
	hb, ok3 := in.read(u32(st[5]), u32(st[6]))
	if !ok1 || !ok2 || !ok3 {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if in.call == nil {
		st[0] = uint64(statusBadArgument)
		return
	}
	c := in.call
	if code < 200 || code > 599 {
		st[0] = uint64(statusBadArgument)
		return
	}
	var ok bool
	if c.pairs, ok = parseMap(hb, c.pairs); !ok {
		st[0] = uint64(statusSerializationFailed)
		return
	}
	if !c.spendHeaders(len(hb)) {
		st[0] = uint64(statusBadArgument)
		return
	}
	c.replied = true
	c.h.SendLocalReply(int(code), details, body, c.pairs)
	st[0] = uint64(statusOK)
}

func hostContinueStream(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	if in.call == nil || u32(st[0]) > streamResponse {
		st[0] = uint64(statusBadArgument)
		return
	}
	in.call.continued = true
	st[0] = uint64(statusOK)
}

func hostContinueRequest(ctx context.Context, _ api.Module, st []uint64) {
	if in := instanceOf(ctx); in.call != nil {
		in.call.continued = true
	}
	st[0] = uint64(statusOK)
}

func hostContinueResponse(ctx context.Context, m api.Module, st []uint64) {
	hostContinueRequest(ctx, m, st)
}

func hostCloseStream(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	if in.call == nil || u32(st[0]) > streamResponse {
		st[0] = uint64(statusBadArgument)
		return
	}
	in.call.closed = true
	st[0] = uint64(statusOK)
}

func hostSetEffectiveContext(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	id := u32(st[0])
	if id == rootContextID || (in.call != nil && id == in.call.id) {
		st[0] = uint64(statusOK)
		return
	}
	st[0] = uint64(statusBadArgument)
}

func hostHTTPCall(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	up, ok1 := in.read(u32(st[0]), u32(st[1]))
	hb, ok2 := in.read(u32(st[2]), u32(st[3]))
	body, ok3 := in.read(u32(st[4]), u32(st[5]))
	tb, ok4 := in.read(u32(st[6]), u32(st[7]))
	timeoutMS, retID := u32(st[8]), u32(st[9])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		st[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if in.call == nil || in.f.rt.cfg.Callout == nil {
		st[0] = uint64(statusInternalFailure)
		return
	}
	c := in.call
	if c.callouts >= maxCallouts {
		st[0] = uint64(statusInternalFailure)
		return
	}
	headers, ok := parseMap(hb, nil)
	if !ok {
		st[0] = uint64(statusBadArgument)
		return
	}
	trailers, ok := parseMap(tb, nil)
	if !ok {
		st[0] = uint64(statusBadArgument)
		return
	}
	// The request outlives this host call: copy it out of guest memory.
	req := &CalloutRequest{
		Tenant:   in.f.tenant,
		Upstream: string(up),
		Headers:  copyPairs(headers),
		Body:     append([]byte(nil), body...),
		Trailers: copyPairs(trailers),
		Timeout:  min(time.Duration(timeoutMS)*time.Millisecond, maxCalloutTime),
	}
	if req.Timeout <= 0 {
		req.Timeout = maxCalloutTime
	}
	c.callouts++
	token := uint32(c.callouts)
	if s := in.writeU32(retID, token); s != statusOK {
		st[0] = uint64(s)
		return
	}
	c.pending = append(c.pending, pendingCallout{token: token, req: req})
	in.holdEntry(holdCallout)
	st[0] = uint64(statusOK)
}

func copyPairs(p []HeaderPair) []HeaderPair {
	out := make([]HeaderPair, len(p))
	for i, kv := range p {
		out[i] = HeaderPair{Key: append([]byte(nil), kv.Key...), Value: append([]byte(nil), kv.Value...)}
	}
	return out
}

func equalFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ---- WASI

func wasiOK(_ context.Context, _ api.Module, st []uint64)    { st[0] = errnoSuccess }
func wasiBadf(_ context.Context, _ api.Module, st []uint64)  { st[0] = errnoBadf }
func wasiNosys(_ context.Context, _ api.Module, st []uint64) { st[0] = errnoNosys }

func wasiSizesGet(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	if !in.mem.WriteUint32Le(u32(st[0]), 0) || !in.mem.WriteUint32Le(u32(st[1]), 0) {
		in.fail("wasi sizes_get: pointer out of bounds")
		st[0] = errnoFault
		return
	}
	st[0] = errnoSuccess
}

func wasiFdWrite(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	fd, iovs, n, nwritten := u32(st[0]), u32(st[1]), u32(st[2]), u32(st[3])
	if fd != 1 && fd != 2 {
		st[0] = errnoBadf
		return
	}
	if n > 1024 {
		st[0] = errnoInval
		return
	}
	vec, ok := in.read(iovs, 8*n)
	if !ok {
		st[0] = errnoFault
		return
	}
	total := uint32(0)
	for i := uint32(0); i < n; i++ {
		p := binary.LittleEndian.Uint32(vec[8*i:])
		l := binary.LittleEndian.Uint32(vec[8*i+4:])
		b, ok := in.read(p, l)
		if !ok {
			st[0] = errnoFault
			return
		}
		level := LogInfo
		if fd == 2 {
			level = LogError
		}
		if len(b) > 0 {
			in.log(level, b)
		}
		total += l
	}
	if !in.mem.WriteUint32Le(nwritten, total) {
		in.fail("fd_write: pointer out of bounds")
		st[0] = errnoFault
		return
	}
	st[0] = errnoSuccess
}

func wasiClockTimeGet(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	var t int64
	switch u32(st[0]) {
	case 0: // realtime
		t = time.Now().UnixNano()
	case 1: // monotonic
		t = int64(time.Since(epoch))
	default:
		st[0] = errnoInval
		return
	}
	if !in.mem.WriteUint64Le(u32(st[2]), uint64(t)) {
		in.fail("clock_time_get: pointer out of bounds")
		st[0] = errnoFault
		return
	}
	st[0] = errnoSuccess
}

func wasiClockResGet(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	if !in.mem.WriteUint64Le(u32(st[1]), 1) {
		in.fail("clock_res_get: pointer out of bounds")
		st[0] = errnoFault
		return
	}
	st[0] = errnoSuccess
}

func wasiRandomGet(ctx context.Context, _ api.Module, st []uint64) {
	in := instanceOf(ctx)
	b, ok := in.read(u32(st[0]), u32(st[1]))
	if !ok {
		st[0] = errnoFault
		return
	}
	_, _ = rand.Read(b)
	st[0] = errnoSuccess
}

func wasiProcExit(ctx context.Context, m api.Module, st []uint64) {
	code := u32(st[0])
	if in := instanceOf(ctx); in != nil {
		in.exited = true
	}
	// wazero's documented way for a host function to end the module: close it, then
	// unwind the guest's stack with sys.ExitError.
	_ = m.CloseWithExitCode(ctx, code)
	panic(sys.NewExitError(code))
}
