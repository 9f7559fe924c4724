package upstreamerr_test

import (
	"testing"
	"time"

	"tollgate/edge/upstreamerr"
)

func TestReasonGate(t *testing.T) {
	var g upstreamerr.Gate
	now := int64(5 * time.Second)
	for i := 0; i < upstreamerr.LinesPerSecond; i++ {
		if ok, held := g.Allow(now); !ok || held != 0 {
			t.Fatalf("line %d: Allow = %v, %d; want true, 0", i, ok, held)
		}
	}
	for i := 0; i < 3; i++ {
		if ok, _ := g.Allow(now + int64(500*time.Millisecond)); ok {
			t.Fatalf("line %d over the second's budget let through", upstreamerr.LinesPerSecond+i)
		}
	}
	if ok, held := g.Allow(now + int64(time.Second)); !ok || held != 3 {
		t.Errorf("next second: Allow = %v, %d; want true, 3", ok, held)
	}
}
