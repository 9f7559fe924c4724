//go:build race

package edge_test

import "time"

// Under the race detector the host side of every guest call runs many times slower: the
// function tests give callbacks more time and the cold start a looser bound.
const (
	fnTestTimeout  = 250 * time.Millisecond
	fnColdStartMax = 30 * time.Second
)
