package main

// S9: TLS 1.3 terminated by the gateway, plain HTTP to the upstream.
//
// Both gateways get the same certificate (ECDSA P-256, *.localhost) and TLS 1.3 only
// (nginx: ssl_protocols TLSv1.3; the client offers nothing older). The load comes from
// the bench's own closed-loop client (load.go), not wrk: wrk sends the URL's host as
// SNI, which must then be an IP literal here (*.localhost does not resolve on every
// machine), and Tollgate rightly refuses a Host whose tenant the SNI does not name (421).
// The client sends SNI tls.localhost and offers X25519 only, so both gateways do the
// same key exchange (Go would otherwise pick its post-quantum hybrid, which nginx's
// OpenSSL lacks). Three runs per gateway, same client:
//
//   - S9p: plain HTTP, keep-alive — the baseline, so the TLS tax is S9 ÷ S9p;
//   - S9: TLS, keep-alive — the per-request cost of encryption;
//   - S9h: TLS, one request per connection — every request pays a full handshake (the
//     client keeps no session tickets), so µs/req there is CPU per handshake plus a
//     request, and its QPS is handshakes per second.

import (
	"flag"
	"fmt"
	"os"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
)

// stormSettle: how long after S9h's storm of handshakes the gateway's RSS is watched
// (-storm-settle; 0, the default, not at all: it lengthens the run by that much per
// gateway). The report line gives the RSS before the storm, right after it, 10 s after
// and at the end: what the process keeps of a storm once it has passed.
var stormSettle = flag.Duration("storm-settle", 0, "S9h: watch the gateway's RSS for this long after the handshake storm (e.g. 30s) and print it before, right after, 10 s after and at the end; 0: not at all (run with -rounds 1)")

func (b *bench) settleAfterStorm(sc *perfScenario, gw string, procs int, p *harness.Proc, r perfResult) {
	if !sc.newConn || *stormSettle <= 0 || p == nil {
		return
	}
	start := time.Now()
	var at10 int64
	for time.Since(start) < *stormSettle {
		time.Sleep(time.Second)
		if at10 == 0 && time.Since(start) >= 10*time.Second {
			at10 = harness.GroupRSS(p)
		}
	}
	end := harness.GroupRSS(p)
	fmt.Fprintf(os.Stderr, "bench: %-4s %-8s procs=%d  RSS before the storm %s, right after %s (peak %s), 10 s after %s, %s after %s\n",
		sc.id, gw, procs, figures.FmtKB(r.rssStartKB), figures.FmtKB(r.rssKB), figures.FmtKB(r.rssPeakKB), figures.FmtKB(at10), *stormSettle, figures.FmtKB(end))
}
