package conn

import "testing"

func TestRawIOSwitch(t *testing.T) {
	defer SetRawIO(RawIO())
	SetRawIO(false)
	if RawIO() {
		t.Error("RawIO on after SetRawIO(false)")
	}
	SetRawIO(true)
	if RawIO() == raceDetector {
		t.Errorf("RawIO() = %v after SetRawIO(true) in a build with raceDetector = %v", RawIO(), raceDetector)
	}
}
