package edge

import (
	"testing"

	"github.com/gofiber/fiber/v2"
)

// fiberMethod must name exactly the methods Fiber routes (its default RequestMethods):
// one it missed would bypass Fiber, one too many would get Fiber's plain-text 400.
func TestFiberMethod(t *testing.T) {
	for _, m := range fiber.DefaultMethods {
		if !fiberMethod([]byte(m)) {
			t.Errorf("fiberMethod(%q) = false; Fiber routes it", m)
		}
	}
	for _, m := range []string{"get", "PROPFIND", "QUERY", "BREW", "", "GET "} {
		if fiberMethod([]byte(m)) {
			t.Errorf("fiberMethod(%q) = true; Fiber does not route it", m)
		}
	}
}
