// Package e2e is Tollgate's end-to-end suite. It builds the tollgate binary once and
// runs `tollgate api`, `tollgate edge` and `tollgate dev` as separate processes against
// real services: a fresh Postgres database per test (testenv.Postgres) and an in-process
// NATS server with JetStream per test (testenv.NATS). Tenant traffic goes through the
// edge to httptest upstreams on 127.0.0.1.
//
// Run it with
//
//	go test -count=1 ./e2e
//
// E2E_RACE=1 builds the binary with -race as well (the processes then fail the test
// when they report a data race). Under E2E_RACE=1 the "applied within 1 s" deadlines
// are widened to 3 s, since the race detector slows the processes several times over;
// without it they are the 1 s the product promises.
//
// Every process's stdout and stderr are kept and printed when its test fails, so a
// failure shows what the api and the edge said. Nothing waits a fixed time: readiness is
// polled on /readyz and asynchronous effects are polled every 10 ms until a deadline.
//
// The edge is addressed as http://<slug>.localhost:<port>. The tests dial 127.0.0.1 and
// set the Host header instead of resolving <slug>.localhost, because Go's resolver does
// not map subdomains of localhost to loopback on every system (curl does).
package e2e
