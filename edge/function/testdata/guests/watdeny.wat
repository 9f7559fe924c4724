;; Refuses a request that carries X-Deny with a local reply: 403, the body "denied by
;; function", and x-denied-by: wat. Written against the proxy-wasm 0.2.1 ABI alone, as
;; watheaders, so that tests under the race detector need not compile a Go guest.
(module
  (import "env" "proxy_get_header_map_value" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $reply (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "x-deny")
  (data (i32.const 32) "denied by function")
  ;; One header pair, serialized as the ABI wants: count, key and value sizes, then each
  ;; NUL-terminated.
  (data (i32.const 64) "\01\00\00\00\0b\00\00\00\03\00\00\00x-denied-by\00wat\00")
  (global $heap (mut i32) (i32.const 1024))
  (func (export "proxy_abi_version_0_2_1"))
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
  ;; map 0: request headers; status 0: found. Action 1: pause (the reply is the answer).
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (if (i32.ne (call $get (i32.const 0) (i32.const 16) (i32.const 6) (i32.const 200) (i32.const 204)) (i32.const 0))
      (then (return (i32.const 0))))
    (drop (call $reply (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 32) (i32.const 18)
      (i32.const 64) (i32.const 28) (i32.const -1)))
    (i32.const 1))
)
