;; S1h's filter: adds x-function: request to the request and x-function: response to the
;; response, written against the proxy-wasm 0.2.1 ABI alone (no SDK, no runtime of its own),
;; so the scenario measures the host's cost of a header edit, not a guest language's.
(module
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "x-function")
  (data (i32.const 32) "request")
  (data (i32.const 48) "response")
  (global $heap (mut i32) (i32.const 1024))
  (func (export "proxy_abi_version_0_2_1"))
  ;; A bump allocator, reset when a request context is created.
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (if (i32.gt_u (i32.add (local.get $p) (local.get $n)) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (if (i32.eq (memory.grow (i32.add (i32.shr_u (local.get $n) (i32.const 16)) (i32.const 1))) (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (i32.add (local.get $p) (local.get $n)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32) (global.set $heap (i32.const 1024)))
  ;; map 0: request headers, 2: response headers
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $add (i32.const 0) (i32.const 16) (i32.const 10) (i32.const 32) (i32.const 7)))
    (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $add (i32.const 2) (i32.const 16) (i32.const 10) (i32.const 48) (i32.const 8)))
    (i32.const 0))
)
