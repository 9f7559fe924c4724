package devstate

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSaveLoadRunning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "dev.json")
	env := map[string]string{Env: path}
	getenv := func(k string) string { return env[k] }
	if got := Path(getenv); got != path {
		t.Fatalf("Path = %q, want %q", got, path)
	}
	if s, err := Load(path); err != nil || s != (State{}) {
		t.Fatalf("Load of a missing file = %+v, %v", s, err)
	}
	if _, ok := Running(getenv); ok {
		t.Fatal("Running with no file")
	}
	want := State{AdminToken: "tgadm_x", Database: "postgres://db", DemoKey: "tg_k", PID: os.Getpid(), NATSURL: "nats://127.0.0.1:1"}
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v (%v), want 0600: it holds secrets", fi.Mode().Perm(), err)
	}
	if got, ok := Running(getenv); !ok || got != want {
		t.Fatalf("Running = %+v, %v; want %+v", got, ok, want)
	}
	// A state whose process is gone is not running.
	want.PID = 1 << 22
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	if _, ok := Running(getenv); ok {
		t.Fatal("Running with a dead pid")
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil {
		t.Fatal("Load of a torn file: no error")
	}
	env[Env] = Off
	if Path(getenv) != "" {
		t.Fatal("Path with the setting off")
	}
	env[Env] = ""
	env["XDG_STATE_HOME"] = dir
	if got := Path(getenv); got != filepath.Join(dir, "tollgate", "dev.json") {
		t.Fatalf("Path under XDG_STATE_HOME = %q", got)
	}
}
