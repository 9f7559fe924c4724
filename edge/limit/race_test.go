//go:build race

package limit_test

// raceEnabled: the race detector makes atomics some 30 times slower; the heaviest
// tests shrink their loops under it.
const raceEnabled = true
