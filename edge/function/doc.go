// Package function runs tenants' functions: WebAssembly modules written against the
// proxy-wasm ABI 0.2.1 (the HTTP filter ABI Envoy, Istio, Kong and APISIX run), on wazero,
// a pure-Go runtime. It is the only place untrusted code runs at the edge, and the place
// that bounds it; it knows nothing of routes, plans or fasthttp: the edge hands it an HTTP
// (the request and response it holds) and Limits (the tenant's plan).
//
// Use: one Runtime per process (NewRuntime); Compile once per module hash; NewFilter per
// route and function (it starts one instance, so a module that cannot start fails there);
// per request Start, the On* callbacks the route needs (Exports says which the module
// has), then Done, which returns the request's guest time for metering. After a callback,
// Replied() true means the guest answered with a local reply: the edge sends it and calls
// only Done. An error is an *Error: ReasonBusy is the envelope function_busy (503), every
// other reason function_failed (500); its message is for the tenant's log.
//
// Instances: as Envoy runs every stream of a worker in one VM, a filter keeps a few
// instances, at most min(Limits.Concurrency, GOMAXPROCS), started lazily (the first by
// NewFilter), each holding the contexts of many requests. Start creates the request's
// context (proxy_on_context_create with a fresh id) in an instance free right now, in
// round robin; when all are busy it starts another if under the cap, else waits for the
// round robin's pick (its callback is bounded by the timeout). It then lets the instance
// go: each later callback takes the same instance back (the context lives in its memory)
// only while it runs, so a request holds no instance across its upstream round trip. One
// goroutine at a time runs guest code in an instance, and host calls act on the request
// whose callback runs. Done runs proxy_on_done, proxy_on_log and proxy_on_delete even
// after a failed callback (waiting for a concurrency slot if need be), so the guest frees
// the context, unless the instance died, or unless the caller announced the last
// callback (Call.Last), whose run has already run them. Callbacks that run back to back
// in one run enter the guest once, through functions instrument adds to the module
// (merge.go; SetMergedEntries): the context's creation with the request headers', the
// last response callback with proxy_on_done, proxy_on_log and proxy_on_delete, and those
// three alone. A failure in one still names the callback that was running, and no
// callback runs after a bad host call.
//
// Bounds:
//   - Time: each callback has a deadline (Config.Timeout or Limits.Timeout, default 5ms of
//     wall time). Compile instruments the module (instrument.go): a stop flag, checked at
//     the start of every function and every loop iteration. A watchdog goroutine, awake
//     while guests ran in the last second, checks running instances every millisecond
//     and raises an overdue one's flag; the guest traps at its next call or iteration.
//     A run and the watchdog share no lock: see instance.deadline (SetLockFreeRuns off adds
//     one per instance, for comparison).
//     Starting an instance has Config.StartTimeout (1s). wazero's own cut-off
//     (WithCloseOnContextDone) is not used: it starts a goroutine per guest call, which
//     made a no-op filter cost 15 µs of CPU per request instead of under 1 µs.
//   - Memory: each instance's linear memory is refused growth past its limit (memory.grow
//     answers -1); a module whose declared minimum is over the limit is refused.
//   - Concurrency: a tenant's callbacks run at most Limits.Concurrency (default
//     Config.TenantConcurrency) at once per Runtime; a callback that waits longer than
//     the filter's timeout for a slot fails with ReasonBusy.
//   - Host calls: every pointer and length is checked against the guest's memory; out of
//     bounds, an argument over 16 MiB, or more than 1 MiB of headers set in one request is
//     a bad host call: the request fails with ReasonBadHostCall.
//   - An instance that trapped, timed out, ran out of memory or made a bad host call is
//     dropped, never reused. Every other request whose context lived in it fails its next
//     callback with the same Reason (Detail "its instance failed in another request"), as
//     every stream of a crashed VM fails in Envoy; those failures do not count towards the
//     quarantine, and the next request starts a fresh instance. A filter that fails three requests in a row is quarantined:
//     Start refuses it (ReasonQuarantined) for 1s, doubling with each further failure up to
//     30s; a request that succeeds ends the streak.
//   - Call depth: instrument also counts the guest's call depth, and a call past 32768
//     frames traps (ReasonTrap, Detail "call depth over 32768 (…)"). A function counts one
//     frame per 16 params and locals, since its native frame grows with them, so the
//     bound holds wazero's native stack, memory outside the instance's limit, to about
//     8 MiB; a function that calls nothing is not counted, its frame being the last. An
//     unbounded recursion stops in a few milliseconds, where it grew wazero's stack until
//     its deadline before (a 100 ms deadline let one grow for 169 ms).
//
// Host calls implemented (module "env"): proxy_log, proxy_get_log_level (Info: lower
// levels are dropped), proxy_get_current_time_nanoseconds, proxy_set_tick_period_milliseconds
// (accepted, but proxy_on_tick is never called: there are no timers), proxy_get_property,
// proxy_set_property, proxy_get_buffer_bytes, proxy_set_buffer_bytes, proxy_get_configuration,
// proxy_get_header_map_value, proxy_get_header_map_pairs, proxy_set_header_map_pairs,
// proxy_add_header_map_value, proxy_replace_header_map_value, proxy_remove_header_map_value,
// proxy_get_header_map_size, proxy_send_local_response, proxy_continue_stream,
// proxy_continue_request, proxy_continue_response, proxy_close_stream (the request fails
// with function_failed), proxy_clear_route_cache (no-op), proxy_http_call (run by
// Config.Callout after the callback returns, answered with proxy_on_http_call_response; at
// most 8 per request), proxy_set_effective_context, proxy_done.
//
// Present but answering Unimplemented (12), so SDK-built modules link: shared data
// (proxy_get_shared_data, proxy_set_shared_data), queues (proxy_register_shared_queue,
// proxy_resolve_shared_queue, proxy_dequeue_shared_queue, proxy_enqueue_shared_queue),
// gRPC (proxy_grpc_call, proxy_grpc_stream, proxy_grpc_send, proxy_grpc_cancel,
// proxy_grpc_close), metrics (proxy_define_metric, proxy_increment_metric,
// proxy_record_metric, proxy_get_metric), proxy_get_status, proxy_call_foreign_function.
//
// WASI (module "wasi_snapshot_preview1"), only what SDK guests link against: fd_write
// (stdout to the log at Info, stderr at Error, other descriptors EBADF), clock_time_get,
// clock_res_get, random_get, proc_exit (ends the instance), sched_yield, an empty
// environ_* and args_*, and fd_close, fd_fdstat_get, fd_fdstat_set_flags, fd_seek, fd_read, fd_prestat_get,
// fd_prestat_dir_name answering EBADF and poll_oneoff ENOSYS. Any other import is refused
// by Validate and Compile, and so are instructions instrument does not know (SIMD,
// threads, exceptions), a module exporting a name the host reserves (tollgate_stop,
// tollgate_depth, tollgate_phase, tollgate_hold and the merged entries' names), and code
// naming a global the module does not define.
//
// Guest exports used: proxy_abi_version_0_2_1 (or _0_2_0), proxy_on_context_create,
// proxy_on_memory_allocate (or malloc) and memory are required; _initialize (or _start),
// proxy_on_vm_start, proxy_on_configure, proxy_on_request_headers, proxy_on_request_body,
// proxy_on_response_headers, proxy_on_response_body, proxy_on_http_call_response,
// proxy_on_done, proxy_on_log and proxy_on_delete are called when present. Trailers
// callbacks and proxy_on_tick are never called.
//
// Properties the host answers itself: PropTenant, PropPluginName, PropPluginRoot; the rest
// (PropRoute, PropConsumer, PropRequestID, request.*, source.address) come from
// HTTP.Property, and an authenticating function names the caller with proxy_set_property
// on PropConsumer.
package function
