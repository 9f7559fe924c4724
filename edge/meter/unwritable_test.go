package meter_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tollgate/edge/meter"
)

// A spool directory the meter cannot write stops it at start with an error that says so
// and what to do, as the README says: on a read-only filesystem (a read-only tmpfs mount:
// the test runs as root, who ignores mode bits) and under a path that is a file.
func TestUnwritableSpoolDirRefusedAtStart(t *testing.T) {
	ro := t.TempDir()
	if err := syscall.Mount("tmpfs", ro, "tmpfs", syscall.MS_RDONLY, "size=64k"); err != nil {
		t.Fatalf("mount a read-only tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(ro, 0); err != nil {
			t.Errorf("unmount %s: %v", ro, err)
		}
	})
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"read-only filesystem": ro, "read-only, below": filepath.Join(ro, "spool"), "under a file": filepath.Join(file, "spool")} {
		t.Run(name, func(t *testing.T) {
			m, err := meter.New(meter.Config{EdgeID: "e1", Sink: &memSink{}, SpoolDir: dir})
			if err == nil {
				m.Close(t.Context())
				t.Fatal("a meter started on an unwritable spool directory")
			}
			if !errors.Is(err, meter.ErrSpoolUnwritable) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "does not start") {
				t.Fatalf("error %q does not say the spool directory %s cannot be written and the edge does not start", err, dir)
			}
		})
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Fatalf("files left on the read-only mount: %v", ents)
	}
}
