package harness

import (
	"fmt"
	"os"
	"os/exec"

	"tollgate/infra/aptget"
)

// EnsureTools installs nginx and wrk from Debian's packages when they are missing, saying
// what it installs. nginx is always needed: it is the upstream too. Package scripts are
// kept from starting the system nginx on port 80.
func EnsureTools() error {
	var missing []string
	if _, err := os.Stat(NginxBin()); err != nil {
		missing = append(missing, "nginx-light")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		missing = append(missing, "wrk")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		missing = append(missing, "util-linux")
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing %v: install them (apt-get install -y %v) or run the bench as root", missing, missing)
	}
	const policy = "/usr/sbin/policy-rc.d"
	if _, err := os.Stat(policy); os.IsNotExist(err) {
		// 101 = "action not allowed": invoke-rc.d then leaves the nginx service stopped.
		if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policy)
		}
	}
	if err := aptget.Install("bench", missing...); err != nil {
		// Some releases lack nginx-light; the full package does as well.
		for i, m := range missing {
			if m == "nginx-light" {
				missing[i] = "nginx"
			}
		}
		return aptget.Install("bench", missing...)
	}
	return nil
}

// EnsureH2load installs h2load (Debian's nghttp2-client) when it is missing: the HTTP/2
// scenarios' load generator, wanted only when one of them is selected.
func EnsureH2load() error {
	if _, err := exec.LookPath("h2load"); err == nil {
		return nil
	}
	return aptget.Install("bench", "nghttp2-client")
}
