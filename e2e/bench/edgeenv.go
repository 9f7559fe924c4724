package main

import (
	"flag"
	"strings"
)

// edgeEnv: settings given to every edge the bench starts (-edge-env), for measuring a
// switch such as TOLLGATE_EDGE_JSON_ONE_PASS=off; the bench otherwise drops the
// TOLLGATE_* variables of its own environment.
var edgeEnv = flag.String("edge-env", "", "comma-separated VAR=value settings added to every edge's environment (e.g. TOLLGATE_EDGE_JSON_ONE_PASS=off)")

func edgeEnvList() []string { return envList(*edgeEnv) }

// envList splits a comma-separated VAR=value list (-edge-env, -compare-env-a/-b).
func envList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
