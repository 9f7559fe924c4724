package grpchealth_test

import (
	"context"
	"net"
	"testing"
	"time"

	"tollgate/e2e/bench/grpchealth"
)

// The upstream answers SERVING to Check, and Check fails where nothing serves gRPC.
func TestServeCheck(t *testing.T) {
	addr, closed := freeAddr(t), freeAddr(t)
	go grpchealth.Serve(addr) // runs until the test binary exits, as the upstream runs until killed
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := grpchealth.Check(ctx, addr, "grpc.localhost")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check of the health server at %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := grpchealth.Check(ctx, closed, ""); err == nil {
		t.Error("Check where nothing listens: no error")
	}
}

// freeAddr is a loopback address nothing listens on (until someone takes it).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
