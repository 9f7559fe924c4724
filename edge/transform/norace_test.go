//go:build !race

package transform

// raceBuild: this is not a race-detector build (transform_race_test.go).
const raceBuild = false
