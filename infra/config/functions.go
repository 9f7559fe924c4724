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
	c.EdgeFunctionCacheDir = getenv("TOLLGATE_EDGE_FUNCTION_CACHE_DIR")
	if c.EdgeFunctionCacheDir == "" && c.MeterSpoolDir != "" {
		c.EdgeFunctionCacheDir = filepath.Join(c.MeterSpoolDir, "functions")
	}
	return nil
}
