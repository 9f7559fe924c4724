package function

import (
	"context"
	"time"
)

// HeaderPair is one header of a map. The bytes belong to whoever passed them and are valid
// only during the call that passed them: copy what must outlive it.
type HeaderPair struct {
	Key, Value []byte
}

// HTTP is the request and the response as the edge holds them, seen by one Call. Every
// method is called on the goroutine that drives the Call, only while a callback runs, so an
// implementation needs no locks. Byte slices handed in are guest memory or host scratch:
// copy them before keeping them. Slices handed out must stay unchanged until the next
// method call.
//
// The request header map includes the pseudo-headers Envoy gives filters (":method",
// ":path", ":authority", ":scheme") and the response header map ":status", so filters
// written for Envoy find them; CalloutHeaders, CalloutTrailers, CalloutBody and the
// configuration buffers are the host's own and never reach HTTP.
type HTTP interface {
	// HeaderValue returns the first value of key (compared without case) in map m.
	HeaderValue(m MapType, key []byte) (value []byte, ok bool)
	// HeaderCount is the number of headers in m (0 when m does not exist in this phase).
	HeaderCount(m MapType) int
	// VisitHeaders calls fn for each header of m in order; false when m does not exist in
	// this phase (for example response headers during on_request_headers).
	VisitHeaders(m MapType, fn func(key, value []byte)) bool
	// SetHeaders replaces the whole map; AddHeader appends a value; ReplaceHeader sets key
	// to one value, adding it when absent; RemoveHeader removes every value of key. False
	// when m cannot be changed in this phase.
	SetHeaders(m MapType, pairs []HeaderPair) bool
	AddHeader(m MapType, key, value []byte) bool
	ReplaceHeader(m MapType, key, value []byte) bool
	RemoveHeader(m MapType, key []byte) bool
	// Buffer returns RequestBody or ResponseBody whole (the edge buffers bodies up to the
	// route's limit); false when it does not exist in this phase.
	Buffer(b BufferType) ([]byte, bool)
	// SetBuffer replaces the body with data.
	SetBuffer(b BufferType, data []byte) bool
	// Property answers proxy_get_property for the paths the host does not answer itself
	// (PropTenant, PropPluginName and PropPluginRoot are the host's). path is the guest's
	// NUL-separated segments, comparable to the Prop constants.
	Property(path []byte) ([]byte, bool)
	// SetProperty: the edge accepts PropConsumer (an authenticating function names the
	// caller) and refuses what it does not know.
	SetProperty(path, value []byte) bool
	// SendLocalReply records the guest's own answer: the edge sends it instead of going on
	// (or instead of the upstream's response) once the callback returns.
	SendLocalReply(status int, details, body []byte, headers []HeaderPair)
	// Log is proxy_log, and what the guest writes to stdout (LogInfo) or stderr (LogError).
	Log(level LogLevel, msg []byte)
}

// CalloutRequest is a guest's proxy_http_call, for Config.Callout. Headers include the
// pseudo-headers the guest set (":method", ":path", ":authority", and maybe ":scheme").
// Upstream is the guest's first argument as given (Envoy's cluster name): the edge reads it
// as the callout's target and checks it against the tenant's address rules.
type CalloutRequest struct {
	Tenant   string
	Upstream string
	Headers  []HeaderPair
	Body     []byte
	Trailers []HeaderPair
	Timeout  time.Duration
}

// CalloutResponse is the answer handed back to the guest; Headers should include ":status".
type CalloutResponse struct {
	Headers  []HeaderPair
	Body     []byte
	Trailers []HeaderPair
}

// CalloutFunc performs a callout; an error answers the guest with no headers and no body
// (Envoy's way of saying the call failed).
type CalloutFunc func(ctx context.Context, req *CalloutRequest) (*CalloutResponse, error)
