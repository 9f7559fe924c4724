//go:build race

package conn

// raceDetector: this is a race-detector build, which never uses raw socket I/O (SetRawIO).
const raceDetector = true
