//go:build race

package transform

// raceBuild: sync.Pool drops items at random under the race detector, so a pooled path
// allocates there now and then.
const raceBuild = true
