//go:build !race

package conn

// raceDetector: this is not a race-detector build (SetRawIO).
const raceDetector = false
