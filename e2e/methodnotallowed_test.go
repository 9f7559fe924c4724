package e2e

import (
	"fmt"
	"testing"
)

// TestMethodNotAllowed: a path some route matches, though not with the request's method,
// is 405 method_not_allowed with an Allow naming the methods the matching routes list; a
// path no route matches stays 404 route_not_found.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")

	api.createTenant("verbs")
	api.createRoute("verbs", routeSpec("user", "=/users/{id}", up.URL, "none", "methods", []string{"GET"}))
	api.createRoute("verbs", routeSpec("user-del", "/users/{id}", up.URL, "none", "methods", []string{"DELETE"}))
	eventually(t, applyDeadline, "DELETE /users/7/x is served", func() error {
		r, err := edge.do("DELETE", "verbs", "/users/7/x")
		if err == nil && r.Status != 200 {
			err = fmt.Errorf("DELETE /users/7/x: %s", r)
		}
		return err
	})
	eventually(t, applyDeadline, "GET /users/7 is served", served(edge, "verbs", "/users/7", "up"))

	r, err := edge.do("POST", "verbs", "/users/7")
	if err != nil {
		t.Fatal(err)
	}
	wantEnvelope(t, r, 405, "method_not_allowed")
	if got := r.Header.Get("Allow"); got != "GET, DELETE" {
		t.Errorf("POST /users/7: Allow %q, want %q", got, "GET, DELETE")
	}
	// Only the prefix route matches the longer path.
	r, err = edge.do("PUT", "verbs", "/users/7/x")
	if err != nil {
		t.Fatal(err)
	}
	wantEnvelope(t, r, 405, "method_not_allowed")
	if got := r.Header.Get("Allow"); got != "DELETE" {
		t.Errorf("PUT /users/7/x: Allow %q, want DELETE", got)
	}
	r = edge.get(t, "verbs", "/nope")
	wantEnvelope(t, r, 404, "route_not_found")
	if got := r.Header.Get("Allow"); got != "" {
		t.Errorf("404 with Allow %q", got)
	}
}
