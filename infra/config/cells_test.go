package config_test

import (
	"strings"
	"testing"

	"tollgate/infra/config"
)

// TestCellsUnset: without TOLLGATE_CELLS there is one cell, default, whose bucket keeps
// the name the config bucket always had, on the main NATS.
func TestCellsUnset(t *testing.T) {
	c, err := config.FromEnv(env(map[string]string{"TOLLGATE_NATS_URL": "nats://main:4222"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CellNames(); len(got) != 1 || got[0] != config.DefaultCell {
		t.Fatalf("cells: %v", got)
	}
	if c.EdgeCell != config.DefaultCell || c.KVBucket() != "tollgate_config" || c.EdgeNATSURL() != "nats://main:4222" {
		t.Fatalf("edge cell %q, bucket %q, nats %q", c.EdgeCell, c.KVBucket(), c.EdgeNATSURL())
	}
	// A Config made without FromEnv (tests, tools) still names the one bucket.
	if b := (&config.Config{NATSPrefix: "x"}).KVBucket(); b != "x_config" {
		t.Fatalf("zero config's bucket: %q", b)
	}
}

// TestCellsDeclared: each cell gets its own bucket and, when given, its own NATS; an edge
// follows its cell's bucket on its cell's NATS.
func TestCellsDeclared(t *testing.T) {
	c, err := config.FromEnv(env(map[string]string{
		"TOLLGATE_NATS_URL":    "nats://main:4222",
		"TOLLGATE_NATS_PREFIX": "tg",
		"TOLLGATE_CELLS":       " default ; eu-2=nats://a:4222,nats://b:4222; us-1",
		"TOLLGATE_EDGE_CELL":   "eu-2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.CellNames(), ","); got != "default,eu-2,us-1" {
		t.Fatalf("cells: %s", got)
	}
	for cell, want := range map[string][2]string{
		"default": {"tg_config", "nats://main:4222"},
		"eu-2":    {"tg_config_eu-2", "nats://a:4222,nats://b:4222"},
		"us-1":    {"tg_config_us-1", "nats://main:4222"},
	} {
		if b, u := c.CellBucket(cell), c.CellNATSURL(cell); b != want[0] || u != want[1] {
			t.Errorf("cell %s: bucket %q, nats %q; want %v", cell, b, u, want)
		}
	}
	if c.KVBucket() != "tg_config_eu-2" || c.EdgeNATSURL() != "nats://a:4222,nats://b:4222" {
		t.Fatalf("edge: bucket %q, nats %q", c.KVBucket(), c.EdgeNATSURL())
	}
	// An edge told only its cell follows that cell's bucket on the main NATS.
	c, err = config.FromEnv(env(map[string]string{"TOLLGATE_EDGE_CELL": "b"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.KVBucket() != "tollgate_config_b" || c.EdgeNATSURL() != config.DefaultNATSURL {
		t.Fatalf("edge of b alone: bucket %q, nats %q", c.KVBucket(), c.EdgeNATSURL())
	}
}

// TestCellsRefused: a malformed list stops the process with a message naming the variable.
func TestCellsRefused(t *testing.T) {
	for _, tc := range []struct{ cells, edge, want string }{
		{"a;b", "", "must be declared"},
		{"default;Bad", "", "not a cell name"},
		{"default;a;a", "", "declared twice"},
		{"default;a=", "", "empty NATS URL"},
		{";", "", "declares no cell"},
		{"default;a", "b", "not among TOLLGATE_CELLS"},
		{"", "under_score", "TOLLGATE_EDGE_CELL"},
	} {
		_, err := config.FromEnv(env(map[string]string{"TOLLGATE_CELLS": tc.cells, "TOLLGATE_EDGE_CELL": tc.edge}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cells %q, edge %q: err %v, want %q", tc.cells, tc.edge, err, tc.want)
		}
	}
}
