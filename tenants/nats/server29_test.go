package nats_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// TestMachineServer runs the whole cycle against the machine's NATS server (2.9 here),
// which has fewer features than the embedded one, in a bucket of its own that it deletes
// afterwards. TOLLGATE_TEST_NATS_URL overrides the address; .ci/services starts the server.
func TestMachineServer(t *testing.T) {
	t.Parallel()
	url := os.Getenv("TOLLGATE_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if c, err := net.DialTimeout("tcp", url[len("nats://"):], 500*time.Millisecond); err != nil {
		t.Fatalf("no NATS server at %s (start it: bash .ci/services): %v", url, err)
	} else {
		c.Close()
	}
	nc, js := connect(t, url)
	t.Logf("server %s", nc.ConnectedServerVersion())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket := testenv.Name("tgtest_")
	kv, err := tgnats.EnsureBucket(ctx, js, bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteKeyValue(context.Background(), bucket) })
	if _, err := tgnats.EnsureBucket(ctx, js, bucket, 1); err != nil {
		t.Fatalf("second EnsureBucket: %v", err)
	}

	p, err := tgnats.NewPublisher(nc, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	var batch []tenants.Change
	for i := range 200 {
		batch = append(batch, put(int64(i+1), key(fmt.Sprint("t", i%2), i), "v1"))
	}
	batch = append(batch, del(201, key("t0", 0)))
	if err := p.Publish(ctx, batch); err != nil {
		t.Fatal(err)
	}

	r, r1 := newRecorder(), newRecorder()
	w := watch(t, js, bucket, r.config(""))
	w1 := watch(t, js, bucket, r1.config(tenants.TenantFilter("t1")))
	waitReady(t, w)
	waitReady(t, w1)
	if n, n1 := r.len(), r1.len(); n != 199 || n1 != 100 {
		t.Errorf("loaded %d keys (want 199) and, for t1, %d (want 100)", n, n1)
	}
	if err := p.Publish(ctx, []tenants.Change{put(202, key("t1", 1), "v2"), del(203, key("t1", 3))}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		for _, rec := range []*recorder{r, r1} {
			if v, _ := rec.get(key("t1", 1)); v != string(value(202, "v2")) {
				return fmt.Errorf("update not seen: %s", v)
			}
			if _, ok := rec.get(key("t1", 3)); ok {
				return fmt.Errorf("delete not seen")
			}
		}
		return nil
	})
	r.check(t)
	r1.check(t)

	if err := tgnats.Resync(ctx, kv, []tenants.Change{put(300, "t9.tenant", "only")}); err != nil {
		t.Fatal(err)
	}
	if got := bucketState(t, kv); len(got) != 1 || got["t9.tenant"] == "" {
		t.Errorf("after resync the bucket holds %d keys: %v", len(got), got["t9.tenant"])
	}
}
