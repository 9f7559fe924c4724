package config

import (
	"log/slog"
	"os"
	"strings"
)

// NewLogger writes JSON lines to stderr at level (TOLLGATE_LOG_LEVEL: debug, info, warn,
// error), each tagged with the process it comes from, and makes itself slog's default.
func NewLogger(level, process string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	// Libraries that log through slog.Default (the NATS connection) write the same way.
	slog.SetDefault(log)
	return log.With("process", process)
}
