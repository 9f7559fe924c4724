package harness

import (
	"fmt"
	"os"
	"os/exec"
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
	fmt.Fprintf(os.Stderr, "bench: installing %v with apt-get\n", missing)
	const policy = "/usr/sbin/policy-rc.d"
	if _, err := os.Stat(policy); os.IsNotExist(err) {
		// 101 = "action not allowed": invoke-rc.d then leaves the nginx service stopped.
		if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policy)
		}
	}
	install := func(pkgs ...string) error {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd.Run()
	}
	if err := install(missing...); err != nil {
		fmt.Fprintln(os.Stderr, "bench: apt-get install failed; running apt-get update and retrying")
		upd := exec.Command("apt-get", "update")
		upd.Stdout, upd.Stderr = os.Stderr, os.Stderr
		if err := upd.Run(); err != nil {
			return fmt.Errorf("apt-get update: %v", err)
		}
		if err := install(missing...); err != nil {
			// Some releases lack nginx-light; the full package does as well.
			for i, m := range missing {
				if m == "nginx-light" {
					missing[i] = "nginx"
				}
			}
			if err := install(missing...); err != nil {
				return fmt.Errorf("apt-get install %v: %v", missing, err)
			}
		}
	}
	return nil
}
