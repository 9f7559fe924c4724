//go:build !race

package edge

// raceDetector: this is not a race-detector build (SetRawIO).
const raceDetector = false
