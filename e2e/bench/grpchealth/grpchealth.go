// Package grpchealth is the upstream of the bench's S1grpc scenario and the check that a
// gateway passes its calls on: a health service served by the bench binary in a process
// of its own (its own lean server, ServeLean, or grpc-go's, Serve), and a client that
// calls Health/Check. h2load, which drives the
// scenario, reads no trailers, so only Check can tell a SERVING answer from a gRPC error
// carried in a 200.
package grpchealth

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// ServicePath is the path prefix of the health service's methods: a route for it
	// carries every call.
	ServicePath = "/grpc.health.v1.Health"
	// CheckPath is the path of a Health/Check call.
	CheckPath = ServicePath + "/Check"
)

// EmptyRequest is an empty HealthCheckRequest in gRPC's length-prefixed framing: not
// compressed, 0 bytes of message. It asks for the server's overall status.
var EmptyRequest = []byte{0, 0, 0, 0, 0}

// Serve is the upstream's main: grpc-go's health service on addr, whose overall status
// (service "", what EmptyRequest asks for) is SERVING, until killed. It returns the
// process's exit status.
func Serve(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Check calls Health/Check at addr over h2c, with authority as :authority (empty: addr),
// and fails unless the answer is SERVING.
func Check(ctx context.Context, addr, authority string) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if authority != "" {
		opts = append(opts, grpc.WithAuthority(authority))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("Health/Check: %s", resp.GetStatus())
	}
	return nil
}
