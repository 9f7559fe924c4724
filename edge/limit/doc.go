// Package limit is the edge's flow control: rate limits (GCRA), monthly quotas and
// concurrency caps, counted in process and, for the limits that must hold across the
// fleet, in Redis. The edge compiles its plans and routes into Rules when config
// changes and, per request, calls AllowAt with the request's checks and AcquireAll for
// its concurrency caps.
//
// It must not make a request wait on Redis for longer than Config.Timeout, turn a Redis
// failure into an error, or take a lock that two keys share on the request path.
//
// # Rates: GCRA
//
// A rate of r requests per period with burst b is a GCRA with emission interval
// T = period/r and tolerance τ = T·b. A key's state is one number, its theoretical
// arrival time (TAT). A request at now is admitted when max(TAT, now) + T − now ≤ τ,
// and then TAT becomes max(TAT, now) + T; a refused request changes nothing. Remaining
// is ⌊(τ − (TAT − now)) / T⌋, Reset is TAT − now (until the bucket is full again),
// RetryAfter is max(TAT, now) + T − τ − now. A key whose TAT is not after now is
// indistinguishable from an unknown key, which is what makes evicting idle keys free.
//
// # In process: bounded, lock-free
//
// Local state lives in a fixed-size set-associative table (8 slots of 16 bytes per
// 136-byte bucket, allocated once: Config.MaxKeys, default 2^18 keys = 4.25 MiB, 17 MiB
// for 2^20). A slot is a key hash and a TAT, both atomics: requests update the TAT with
// compare-and-swap, so the hot path takes no lock and allocates nothing. Inserting a new key takes only its
// bucket's insert lock. A full bucket evicts the slot with the smallest TAT: free when
// that key is idle; otherwise the key forgets at most its outstanding debt
// ((TAT − now)/T requests, counted in tollgate_limit_evictions_total). A flood of
// distinct keys therefore cannot grow memory, and evicts other keys' state only when
// more keys are active at once than the table holds. Keys are hashed with a per-process
// seed, so clients cannot aim their keys at one bucket.
//
// Keys counted in Redis in batches (approximate rates, quotas) have an entry (~200
// bytes, allocated on the key's first request) in a second fixed-size table
// (Config.MaxSyncedKeys, default 2^16, least recently used evicted); evicted entries are
// pushed once more and dropped, so the sync list holds at most the table plus the keys
// created within one sync interval. Concurrency counters have a third table
// (Config.MaxInflightKeys).
//
// # Modes
//
// ModeLocal: each edge enforces its share, rate r/E and burst ⌈b/E⌉ with E the live
// edges (1 without Redis). Exact when the load balancer spreads a key evenly.
//
// ModeExact: one EVALSHA per request runs the GCRA of every exact rate of the request
// and the count of every exact quota, and commits all or none. Times are passed from
// the edge's clock (µs since 2025-01-01, fractional T allowed), so edges need
// NTP-synchronised clocks: a skew of s seconds lets through at most min(s·r, b) more
// admissions, once (the edge ahead finds a bucket the edge behind just spent that much
// fuller). Requests refused locally never reach Redis.
//
// ModeApproximate: each edge admits against its view of the shared TAT: the TAT it last
// read plus its own admissions since. Every SyncInterval I it pushes its admission count
// k for each key it used (one pipelined round trip per 256 keys, ≤ Timeout δ); Redis
// sets TAT = max(TAT, now) + k·T and returns it, and the view restarts from it. Redis
// traffic is one command per active key per interval, independent of the request rate.
//
// Error bound of ModeApproximate, E edges, I' = I + δ. Counting is never short: a batch
// is charged at push time, later than its requests, which only moves the TAT further
// out (a push that fails is kept and charged later). What an edge cannot see when it admits are the other edges' admissions of the
// last 2·I' (pushed within I', read back within another I'), and an edge's own view
// never lets it admit more than b + r·x in x seconds. So the shared TAT never runs more
// than (E−1)·(b + 2·r·I') emission intervals ahead of what the admitting edge saw, and
// over any window of w seconds the cluster admits at most
//
//	r·w + b + (E−1)·(b + 2·r·I')
//
// against r·w + b for ModeExact. The excess is a one-off bounded amount, not a rate:
// every admission reaches the shared TAT within I', and edges refuse while it is in
// debt, so under sustained overload the admitted rate is r. The (E−1)·b term is the
// worst case of all edges spending a full bucket at the same moment; a steady flood
// stays far below the bound (two edges at three times a 100/s limit for 10 s: within
// 1% of ModeExact). Charging a batch at push time over-counts by at most one interval
// of refill, so steady traffic below the rate is not refused when b ≥ r·I' + 1 (11 at
// 100/s with 100 ms); limits with smaller bursts should use ModeExact.
//
// # Quotas
//
// A quota counts requests per calendar month (UTC) in Redis under
// "<prefix>:q:{tenant}:<name>:<key>:<YYYYMM>", so a new month starts a new key and the
// count survives edge restarts (the key expires 7 days after its month). ModeExact
// checks and increments it in the request's EVALSHA: exactly N are admitted across any
// number of edges and restarts. Otherwise the edge admits while the count it last read
// plus its own unpushed admissions is below the limit and pushes them with INCRBY every
// SyncInterval; others' admissions of the last 2·I' may be unseen, so the overshoot is
// at most the admissions of the other edges in 2·I'. A key's first request on an edge
// reads its count (one GET), so a restarted edge starts from the cluster's count, and
// Close pushes what is pending (when Redis is reachable).
//
// # Redis faults
//
// Every Redis call has a deadline (Config.Timeout, default 50 ms). FailureThreshold
// consecutive failures open a breaker: requests stop calling Redis and every exact or
// approximate limit is enforced at this edge's local share (rate r/E, burst ⌈b/E⌉;
// quota: (limit − last count read) ÷ E more requests, pushed to Redis on recovery), E
// being the live edges last counted. The live-edge count comes from a heartbeat: every
// HeartbeatInterval each edge ZADDs its id with the time to "<prefix>:edges" and counts
// the members seen within EdgeTTL. While the breaker is open a background probe tries
// Redis every ProbeInterval; its first success closes the breaker. Each change is
// logged once (slog, Warn then Info), counted, and visible in State and the
// tollgate_limit_degraded gauge. A request never waits on Redis longer than Timeout,
// and waits not at all while the breaker is open.
//
// # Redis Cluster and Sentinel
//
// Every key of a rule carries its tenant as a hash tag ("{tenant}"), so the keys of one
// request's EVALSHA, all of one tenant, share a slot. The breaker is per limiter: while
// any master is unreachable every cluster limit is at the local share. On Redis Cluster
// the probe reads the slot map afresh and loads the scripts on every master,
// so it succeeds only when every slot is served again, and a promoted replica has the
// scripts before requests need them.
//
// # Concurrency
//
// A concurrency cap is an atomic in-flight counter per key (per tenant, per consumer),
// at this edge's share ⌈max/E⌉. Over the cap the request is refused at once, with
// tenants.EOverloaded (503, Retry-After 1): a cap is load shedding that protects the
// other tenants, not a rate the client exceeded. Nothing queues and no counter is
// shared between keys, so a tenant flooding at ten times its cap costs another tenant
// nothing but CPU.
//
// # Combining limits
//
// A request is admitted when every check admits it; the Decision reports the tightest
// limit (fewest remaining). Local checks are taken in order and refunded (TAT − T,
// count − 1) when a later check refuses; exact checks are all-or-nothing inside the
// script, which runs last and only when the local checks admitted. A refused request
// therefore consumes no limit.
package limit
