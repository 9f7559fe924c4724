package grpchealth_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"tollgate/e2e/bench/grpchealth"
)

// The lean upstream answers grpc-go's client as grpc-go's health server does, also past
// the connection's first flow-control window (10,000 answers of 7 bytes), and refuses a
// named service and another method as it does.
func TestServeLean(t *testing.T) {
	addr := freeAddr(t)
	go grpchealth.ServeLean(addr) // runs until the test binary exits
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for grpchealth.Check(ctx, addr, "grpc.localhost") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Check of the lean server at %s never succeeded", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var g errgroup.Group
	for range 100 {
		g.Go(func() error {
			for range 100 {
				resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					return err
				}
				if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("status %s", resp.GetStatus())
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("10,000 calls on one connection: %v", err)
	}

	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "billing"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check of a named service: %v, want NotFound", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch: %v, want Unimplemented", err)
	}
}

// A client that keeps no HPACK table (SETTINGS_HEADER_TABLE_SIZE 0, as nginx's grpc_pass)
// gets answers it can decode without one, call after call.
func TestServeLeanNoHeaderTable(t *testing.T) {
	addr := freeAddr(t)
	go grpchealth.ServeLean(addr)
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	dec := hpack.NewDecoder(0, nil)
	fr.ReadMetaHeaders = dec
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", grpchealth.CheckPath},
		{":authority", "grpc.localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for id := uint32(1); id <= 5; id += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, grpchealth.EmptyRequest); err != nil {
			t.Fatal(err)
		}
	}
	ended := 0
	for ended < 3 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answers: %v", ended, err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamEnded() {
			if s := h.Fields[len(h.Fields)-1]; s.Name != "grpc-status" || s.Value != "0" {
				t.Errorf("stream %d ended with %v", h.StreamID, h.Fields)
			}
			ended++
		}
	}
}
