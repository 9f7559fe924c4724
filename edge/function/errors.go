package function

import "fmt"

// Reason says why a function failed, for the edge's envelope and the tenant's log.
type Reason string

const (
	ReasonTrap        Reason = "trap"          // the guest trapped (unreachable, division by zero, stack overflow…)
	ReasonTimeout     Reason = "timeout"       // a callback ran past its time
	ReasonMemory      Reason = "memory"        // the module needs more memory than its limit
	ReasonBadHostCall Reason = "bad_host_call" // out-of-bounds pointers, oversized data, a broken ABI contract
	ReasonBusy        Reason = "busy"          // the tenant's concurrency cap stayed full
	ReasonStart       Reason = "start"         // the module failed to instantiate or to configure
	ReasonQuarantined Reason = "quarantined"   // it failed on its last requests and is refused for a while
)

// Error is how a filter fails. Busy becomes the edge's function_busy (503), every other
// reason function_failed (500). Detail is for the tenant's log: it names the callback and
// what went wrong, never host internals.
type Error struct {
	Reason   Reason
	Function string // the function's name (the route's reference)
	Callback string // the guest export that was running, e.g. "proxy_on_request_headers"
	Detail   string
}

func (e *Error) Error() string {
	if e.Callback == "" {
		return fmt.Sprintf("function %s: %s: %s", e.Function, e.Reason, e.Detail)
	}
	return fmt.Sprintf("function %s: %s in %s: %s", e.Function, e.Reason, e.Callback, e.Detail)
}
