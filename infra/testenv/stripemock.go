package testenv

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StripeMockVersion is the stripe-mock the tests run: the first release whose OpenAPI
// spec serves /v1/billing/meter_events (v0.162.0 does not).
const StripeMockVersion = "v0.203.0"

var stripeMock struct {
	once sync.Once
	url  string
	err  error
}

// StripeMock returns the base URL of a stripe-mock serving this test binary: built once
// (go install of StripeMockVersion into the user cache directory, reused by later runs;
// TOLLGATE_STRIPE_MOCK names a prebuilt binary instead) and started on a free loopback
// port at the first call. stripe-mock keeps no state, so tests can share it. The process
// ends with the test binary (StopStripeMock from TestMain, or the kernel's
// parent-death signal).
func StripeMock(tb testing.TB) string {
	tb.Helper()
	stripeMock.once.Do(func() { stripeMock.url, stripeMock.err = startStripeMock() })
	if stripeMock.err != nil {
		tb.Fatal(stripeMock.err)
	}
	return stripeMock.url
}

var stripeMockCmd *exec.Cmd

// StopStripeMock ends the stripe-mock StripeMock started, if any.
func StopStripeMock() {
	if stripeMockCmd != nil {
		stripeMockCmd.Process.Kill()
		stripeMockCmd.Wait()
	}
}

func startStripeMock() (string, error) {
	bin := os.Getenv("TOLLGATE_STRIPE_MOCK")
	if bin == "" {
		var err error
		if bin, err = buildStripeMock(); err != nil {
			return "", err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-http-port", port)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	// The mock must not outlive a test binary that dies without calling StopStripeMock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting stripe-mock: %v", err)
	}
	stripeMockCmd = cmd
	for deadline := time.Now().Add(15 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("stripe-mock did not start listening on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buildStripeMock installs stripe-mock at StripeMockVersion into the user cache
// directory (once per version; a later run reuses the binary).
func buildStripeMock() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tollgate", "stripe-mock-"+StripeMockVersion)
	bin := filepath.Join(dir, "stripe-mock")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+StripeMockVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building stripe-mock %s: %v\n%s", StripeMockVersion, err, out)
	}
	return bin, nil
}
