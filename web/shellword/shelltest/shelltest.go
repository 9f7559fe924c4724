// Package shelltest runs the command lines the console and the portal show for copying in
// the real shells a reader pastes them into, for tests. zsh and fish are Debian packages
// a fresh machine of the project's kind lacks: Ensure installs them, as the browser tests
// install Chromium.
package shelltest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"tollgate/infra/aptget"
)

// Shells are the shells every copy line must work in: sh is dash on Debian.
var Shells = []string{"sh", "bash", "zsh", "fish"}

var (
	once    sync.Once
	missing error
)

// Ensure installs the shells that are missing with apt-get when the tests run as root or
// with CI=true, once per process, and fails t when they are still missing.
func Ensure(t testing.TB) {
	t.Helper()
	once.Do(func() { missing = install() })
	if missing != nil {
		t.Fatal(missing)
	}
}

func install() error {
	var absent []string
	for _, sh := range Shells {
		if _, err := exec.LookPath(sh); err != nil {
			absent = append(absent, sh)
		}
	}
	if len(absent) == 0 {
		return nil
	}
	return aptget.Install("shelltest", absent...)
}

// Curl runs line, a command starting with curl, in sh (one of Shells) with curl replaced
// by a function that prints each argument it gets as [arg], and returns what it printed.
// It runs in an empty directory and fails t when anything appears there: part of the line
// ran as code.
func Curl(t testing.TB, sh, line string) string {
	t.Helper()
	Ensure(t)
	var script string
	var args []string
	if sh == "fish" {
		script = "function curl; for a in $argv; printf '[%s]' $a; end; end\n" + line
		args = []string{"--no-config", "-c", script}
	} else {
		script = "curl() { for a do printf '[%s]' \"$a\"; done; }\n" + line
		args = []string{"-c", script}
	}
	dir := t.TempDir()
	cmd := exec.Command(sh, args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "TERM=dumb"}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("%s -c %q: %v\n%s", sh, line, err, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("%s ran part of %q as code: %s appeared", sh, line, entries[0].Name())
	}
	return out.String()
}

// Want is what Curl returns for curl called with args.
func Want(args ...string) string {
	return "[" + strings.Join(args, "][") + "]"
}
