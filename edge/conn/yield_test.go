package conn

import (
	"runtime"
	"testing"
)

// Off, no connection yields whatever GOMAXPROCS is; on, only with one P.
func TestSetYieldReads(t *testing.T) {
	defer SetYieldReads(YieldReads())
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)

	SetYieldReads(true)
	if !yieldReads() {
		t.Error("on, GOMAXPROCS=1: no yield")
	}
	SetYieldReads(false)
	if yieldReads() || YieldReads() {
		t.Error("off: yields")
	}
	SetYieldReads(true)
	runtime.GOMAXPROCS(2)
	if yieldReads() {
		t.Error("on, GOMAXPROCS=2: yields")
	}
}
