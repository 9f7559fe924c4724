//go:build !race

package edge_test

import "time"

const (
	fnTestTimeout  = 0 // the default, 5ms
	fnColdStartMax = 5 * time.Second
)
