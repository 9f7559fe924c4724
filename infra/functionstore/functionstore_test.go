package functionstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/functionstore"
	"tollgate/infra/testenv"
)

// machineJetStream connects to the machine's NATS server (TOLLGATE_TEST_NATS_URL overrides
// it; .ci/services starts it).
func machineJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	url := os.Getenv("TOLLGATE_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 500*time.Millisecond); err != nil {
		t.Fatalf("no NATS server at %s (start it: bash .ci/services): %v", url, err)
	} else {
		c.Close()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func openBucket(t *testing.T, js jetstream.JetStream) (*functionstore.Store, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket := functionstore.BucketName(testenv.Name("tgtest_"))
	s, err := functionstore.Open(ctx, js, bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteObjectStore(ctx, bucket); err != nil {
			t.Logf("delete bucket %s: %v", bucket, err)
		}
	})
	return s, bucket
}

func TestPutGetDelete(t *testing.T) {
	t.Parallel()
	js := machineJetStream(t)
	s, bucket := openBucket(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := functionstore.Open(ctx, js, bucket, 1); err != nil {
		t.Fatalf("second Open of the same bucket: %v", err)
	}

	// Larger than one chunk (128 KiB), so the object is reassembled on Get.
	module := append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte{0xAB, 0x01, 0x7f}, 100_000)...)
	sha, err := s.Put(ctx, module)
	if err != nil {
		t.Fatal(err)
	}
	if sha != functionstore.Digest(module) || !functionstore.ValidDigest(sha) {
		t.Fatalf("Put named the module %q", sha)
	}
	again, err := s.Put(ctx, module)
	if err != nil || again != sha {
		t.Fatalf("second Put = %q, %v", again, err)
	}
	got, err := s.Get(ctx, sha)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Fatalf("Get returned %d bytes, want the %d put", len(got), len(module))
	}
	if ok, err := s.Has(ctx, sha); err != nil || !ok {
		t.Fatalf("Has = %v, %v", ok, err)
	}

	if err := s.Delete(ctx, sha); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, sha); !errors.Is(err, functionstore.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if ok, err := s.Has(ctx, sha); err != nil || ok {
		t.Fatalf("Has after Delete = %v, %v", ok, err)
	}
	if err := s.Delete(ctx, sha); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	// A module put again after its deletion is stored again.
	if _, err := s.Put(ctx, module); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, sha); err != nil {
		t.Fatalf("Get after re-Put: %v", err)
	}

	for _, name := range []string{"", "nope", strings.Repeat("A", 64), "../" + sha[3:]} {
		if _, err := s.Get(ctx, name); !errors.Is(err, functionstore.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", name, err)
		}
	}
	if _, err := s.Get(ctx, functionstore.Digest([]byte("never put"))); !errors.Is(err, functionstore.ErrNotFound) {
		t.Errorf("Get of a digest never put: %v", err)
	}
}

// TestGetVerifiesDigest: bytes stored under a name that is not their digest are refused.
func TestGetVerifiesDigest(t *testing.T) {
	t.Parallel()
	js := machineJetStream(t)
	s, bucket := openBucket(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	name := functionstore.Digest([]byte("the real module"))
	if _, err := raw.PutBytes(ctx, name, []byte("something else")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, name); !errors.Is(err, functionstore.ErrCorrupt) {
		t.Fatalf("Get of mismatched bytes: %v, want ErrCorrupt", err)
	}
	// Put repairs it: the stored size differs from the module's.
	if _, err := s.Put(ctx, []byte("the real module")); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Get(ctx, name); err != nil || string(b) != "the real module" {
		t.Fatalf("Get after repair = %q, %v", b, err)
	}
}

func TestBucketName(t *testing.T) {
	if got := functionstore.BucketName("tollgate"); got != "tollgate_functions" {
		t.Fatalf("BucketName = %q", got)
	}
}

// The api reads back the last lines of one tenant, of one function or all, oldest first.
func TestFunctionLogs(t *testing.T) {
	t.Parallel()
	js := machineJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := testenv.Name("tgtest_")
	r := functionstore.NewLogReader(js, prefix, 1)
	t.Cleanup(func() { js.DeleteStream(context.Background(), functionstore.LogStream(prefix)) })

	if lines, err := r.FunctionLogs(ctx, "t1", "", 10); err != nil || len(lines) != 0 {
		t.Fatalf("no stream yet: %v, %v", lines, err)
	}
	if _, err := functionstore.EnsureLogStream(ctx, js, prefix, 1); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	for i := range 30 {
		fn := "a"
		if i%3 == 0 {
			fn = "b"
		}
		b, _ := json.Marshal(functionstore.LogLine{TenantID: "t1", Function: fn, Level: "info", Message: fmt.Sprint("line ", i)})
		if _, err := js.Publish(ctx, functionstore.LogSubject(prefix, "t1"), b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, functionstore.LogSubject(prefix, "t2"), []byte(`{"function":"a","message":"theirs"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, functionstore.LogSubject(prefix, "t1"), []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	lines, err := r.FunctionLogs(ctx, "t1", "", 5)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l.Message)
	}
	if strings.Join(msgs, ",") != "line 25,line 26,line 27,line 28,line 29" {
		t.Fatalf("last 5: %v", msgs)
	}
	lines, err = r.FunctionLogs(ctx, "t1", "b", 3)
	if err != nil {
		t.Fatal(err)
	}
	msgs = msgs[:0]
	for _, l := range lines {
		msgs = append(msgs, l.Message)
	}
	if strings.Join(msgs, ",") != "line 21,line 24,line 27" {
		t.Fatalf("last 3 of b: %v", msgs)
	}
	if lines, err := r.FunctionLogs(ctx, "t3", "", 10); err != nil || len(lines) != 0 {
		t.Fatalf("a tenant with no lines: %v, %v", lines, err)
	}
}
