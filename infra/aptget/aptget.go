// Package aptget installs Debian packages a fresh machine of the project's kind lacks, for
// the tests and the bench: Chromium, wabt, zsh and fish, nginx and wrk.
//
// go test runs packages as parallel processes, and two of them installing at once made
// apt-get fail on dpkg's lock. Install therefore takes a file lock shared by every process
// on the machine, and asks apt-get to wait for dpkg's own lock as well, for installs that
// are not ours (unattended upgrades).
package aptget

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// lockWait is how long apt-get waits for dpkg's lock held by a process that is not ours.
const lockWait = "DPkg::Lock::Timeout=600"

// Allowed reports whether Install may run apt-get: as root, or in CI.
func Allowed() bool { return os.Geteuid() == 0 || os.Getenv("CI") == "true" }

// Install installs pkgs with apt-get, saying so on stderr on behalf of who. When the
// package lists are missing or stale it refreshes them and tries once more. It fails with
// the command to run by hand when Allowed is false.
func Install(who string, pkgs ...string) error {
	if !Allowed() {
		return fmt.Errorf("missing Debian packages: install them (apt-get install -y %s)", strings.Join(pkgs, " "))
	}
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	fmt.Fprintf(os.Stderr, "%s: installing %v with apt-get\n", who, pkgs)
	install := append([]string{"-o", lockWait, "install", "-y", "-qq"}, pkgs...)
	if err := run(install...); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "%s: apt-get install failed; refreshing the package lists and retrying\n", who)
	if err := run("-o", lockWait, "update", "-qq"); err != nil {
		return fmt.Errorf("apt-get update: %v", err)
	}
	if err := run(install...); err != nil {
		return fmt.Errorf("apt-get install %s: %v", strings.Join(pkgs, " "), err)
	}
	return nil
}

func run(args ...string) error {
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// lock takes the machine-wide lock every Install holds, waiting for other processes.
func lock() (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "tollgate-apt-get.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("apt-get lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("apt-get lock: %v", err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
