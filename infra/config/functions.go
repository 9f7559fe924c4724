package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// Defaults of the edge's function runtime.
const (
	DefaultEdgeFunctionTimeout = 5 * time.Millisecond
	DefaultEdgeFunctionMemory  = 16 << 20
	// DefaultEdgeFunctionWallFactor: a run of callbacks may take this many times its
	// budget in wall time; its fuel bounds the guest's own work at about the budget.
	DefaultEdgeFunctionWallFactor = 4
	// DefaultEdgeFunctionCacheGrace: a module no route names stays on the edge's disk
	// this long, so a rollback finds it there.
	DefaultEdgeFunctionCacheGrace = time.Hour
)

// functions reads the settings of tenants' functions at the edge. It runs after the spool
// directory is known: the module cache defaults to a directory inside it.
func (c *Config) functions(getenv func(string) string) error {
	c.EdgeFunctionTimeout = DefaultEdgeFunctionTimeout
	if v := getenv("TOLLGATE_EDGE_FUNCTION_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Microsecond || d > 10*time.Second {
			return fmt.Errorf("TOLLGATE_EDGE_FUNCTION_TIMEOUT: %q is not a duration between 100µs and 10s (like 5ms)", v)
		}
		c.EdgeFunctionTimeout = d
	}
	c.EdgeFunctionWallFactor = DefaultEdgeFunctionWallFactor
	if v := getenv("TOLLGATE_EDGE_FUNCTION_WALL_FACTOR"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("TOLLGATE_EDGE_FUNCTION_WALL_FACTOR: %q is not a whole number from 1 to 100 (like 4)", v)
		}
		c.EdgeFunctionWallFactor = n
	}
	c.EdgeFunctionMemory = DefaultEdgeFunctionMemory
	if v := getenv("TOLLGATE_EDGE_FUNCTION_MEMORY"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 64<<10 || n > 4<<30 {
			return fmt.Errorf("TOLLGATE_EDGE_FUNCTION_MEMORY: %q is not a byte count between 65536 and 4294967296 (like 16777216)", v)
		}
		c.EdgeFunctionMemory = n
	}
	if v := getenv("TOLLGATE_EDGE_FUNCTION_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("TOLLGATE_EDGE_FUNCTION_CONCURRENCY: %q is not a count from 1 to 10000", v)
		}
		c.EdgeFunctionConcurrency = n
	}
	c.EdgeFunctionCacheGrace = DefaultEdgeFunctionCacheGrace
	if v := getenv("TOLLGATE_EDGE_FUNCTION_CACHE_GRACE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 30*24*time.Hour {
			return fmt.Errorf("TOLLGATE_EDGE_FUNCTION_CACHE_GRACE: %q is not a duration between 1s and 720h (like 1h)", v)
		}
		c.EdgeFunctionCacheGrace = d
	}
	c.EdgeFunctionCacheDir = getenv("TOLLGATE_EDGE_FUNCTION_CACHE_DIR")
	if c.EdgeFunctionCacheDir == "" && c.MeterSpoolDir != "" {
		c.EdgeFunctionCacheDir = filepath.Join(c.MeterSpoolDir, "functions")
	}
	return nil
}
