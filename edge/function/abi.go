package function

// The numbers below are proxy-wasm 0.2.1's (github.com/proxy-wasm/spec, abi-versions/v0.2.1):
// guests compiled by any SDK pass and expect exactly these values.

// status is what a host call returns to the guest.
type status = uint32

const (
	statusOK                  status = 0
	statusNotFound            status = 1
	statusBadArgument         status = 2
	statusSerializationFailed status = 3
	statusInvalidMemoryAccess status = 6
	statusEmpty               status = 7
	statusInternalFailure     status = 10
	statusUnimplemented       status = 12
)

// Action is a guest's answer to an HTTP callback.
type Action uint32

const (
	// ActionContinue: the edge goes on with the request (or the response).
	ActionContinue Action = 0
	// ActionPause: the guest waits for something (an HTTP callout's answer). The host runs
	// the callouts the guest asked for, hands their answers back, and the guest resumes the
	// stream (proxy_continue_stream) or replies (proxy_send_local_response).
	ActionPause Action = 1
)

// MapType names a header map in host calls.
type MapType uint32

const (
	RequestHeaders       MapType = 0
	RequestTrailers      MapType = 1
	ResponseHeaders      MapType = 2
	ResponseTrailers     MapType = 3
	GrpcInitialMetadata  MapType = 4 // never present: gRPC calls are not offered
	GrpcTrailingMetadata MapType = 5 // never present
	CalloutHeaders       MapType = 6 // the answer to an HTTP callout
	CalloutTrailers      MapType = 7
)

// BufferType names a buffer in host calls.
type BufferType uint32

const (
	RequestBody         BufferType = 0
	ResponseBody        BufferType = 1
	DownstreamData      BufferType = 2 // TCP filters only: never present
	UpstreamData        BufferType = 3 // TCP filters only: never present
	CalloutBody         BufferType = 4
	GrpcReceiveBuffer   BufferType = 5 // never present
	VMConfiguration     BufferType = 6 // always empty
	PluginConfiguration BufferType = 7
)

// LogLevel is proxy_log's level.
type LogLevel uint32

const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

func (l LogLevel) String() string {
	switch l {
	case LogTrace:
		return "trace"
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogCritical:
		return "critical"
	}
	return "unknown"
}

// streamType is proxy_continue_stream's and proxy_close_stream's argument.
const (
	streamRequest  = 0
	streamResponse = 1
)

// Property paths, as the guest sends them: segments joined by a NUL byte.
const (
	PropTenant     = "tollgate\x00tenant"
	PropRoute      = "tollgate\x00route"
	PropConsumer   = "tollgate\x00consumer"
	PropRequestID  = "tollgate\x00request_id"
	PropPath       = "request\x00path"
	PropMethod     = "request\x00method"
	PropHost       = "request\x00host"
	PropScheme     = "request\x00scheme"
	PropID         = "request\x00id"
	PropSource     = "source\x00address"
	PropPluginName = "plugin_name"
	PropPluginRoot = "plugin_root_id"
)
