// Package devstate keeps what `tollgate dev` gives back unchanged when it restarts (its
// admin token and the demo consumer's key) and tells the other commands where a running
// dev stack is (its embedded NATS, its management API), so that a newcomer's exported
// token, pasted curl lines and `tollgate billing …` keep working across restarts.
//
// The state is one JSON file, readable by its owner only: the admin token and the key are
// secrets, and their plaintext is nowhere else (the database holds the key's hash).
package devstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Env names the setting that moves the state file; Off keeps no state.
const (
	Env = "TOLLGATE_DEV_STATE"
	Off = "off"
)

// State is what the file holds.
type State struct {
	AdminToken string `json:"admin_token,omitempty"`
	// Database is the database DemoKey belongs to: another database has other keys.
	Database string `json:"database,omitempty"`
	DemoKey  string `json:"demo_key,omitempty"`
	// PID is the running dev's process, 0 once it stopped; NATSURL (set when its NATS is
	// the embedded one) and APIURL are where it serves.
	PID     int    `json:"pid,omitempty"`
	NATSURL string `json:"nats_url,omitempty"`
	APIURL  string `json:"api_url,omitempty"`
}

// Path is the state file's path: TOLLGATE_DEV_STATE, else tollgate/dev.json under
// $XDG_STATE_HOME or ~/.local/state; "" when the setting is "off" or there is no home.
func Path(getenv func(string) string) string {
	switch p := getenv(Env); p {
	case Off:
		return ""
	case "":
	default:
		return p
	}
	dir := getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "tollgate", "dev.json")
}

// Load reads the state at path; a missing file (or path "") is the zero State.
func Load(path string) (State, error) {
	var s State
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("%s: %v (delete it, or set %s=%s)", path, err, Env, Off)
	}
	return s, nil
}

// Save writes s to path whole (a reader never sees half a file), readable by its owner
// only. Path "" saves nothing.
func Save(path string, s State) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dev-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Running is the state of the dev stack running now, if the file names one whose process
// is alive.
func Running(getenv func(string) string) (State, bool) {
	s, err := Load(Path(getenv))
	if err != nil || s.PID <= 0 {
		return State{}, false
	}
	// Signal 0 checks the process exists; EPERM says it does, as another user's.
	if err := syscall.Kill(s.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return State{}, false
	}
	return s, true
}
