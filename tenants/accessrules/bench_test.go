package accessrules_test

import (
	"fmt"
	"strconv"
	"testing"

	"tollgate/tenants/accessrules"
)

// benchAccessRules has n rules over n/4 resources plus role links, like a tenant's API.
func benchAccessRules(b *testing.B, n int) *accessrules.Enforcer {
	var rules, roles [][]string
	for i := 0; len(rules) < n; i++ {
		res := fmt.Sprintf("/v1/res%d", i)
		rules = append(rules,
			[]string{"reader", res + "/:id", "GET|HEAD"},
			[]string{"writer", res + "/:id", "PUT|PATCH|DELETE"},
			[]string{"writer", res, "POST"},
			[]string{"*", res + "/:id/admin/*", "*", "deny"},
		)
	}
	roles = append(roles, []string{"writer", "reader"}, []string{"alice", "writer"})
	return mustCompile(b, rules[:n], roles)
}

func BenchmarkAllow(b *testing.B) {
	subjects := []string{"alice", "mobile-app"}
	get := []byte("GET")
	for _, n := range []int{10, 100} {
		e := benchAccessRules(b, n)
		path := []byte("/v1/res1/42")
		if !e.Allow(subjects, get, path) {
			b.Fatal("denied")
		}
		b.Run(fmt.Sprintf("rules=%d/cached", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !e.Allow(subjects, get, path) {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("rules=%d/uncached", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !e.Decide(subjects, get, path) {
					b.Fatal("denied")
				}
			}
		})
		// Every request a new path: a miss through the cache, then an insert.
		b.Run(fmt.Sprintf("rules=%d/miss", n), func(b *testing.B) {
			b.ReportAllocs()
			buf := []byte("/v1/res1/")
			i := 0
			for b.Loop() {
				i++
				p := strconv.AppendInt(buf[:len("/v1/res1/")], int64(i), 10)
				if !e.Allow(subjects, get, p) {
					b.Fatal("denied")
				}
			}
		})
	}
}
