// Package natsserver runs a real NATS server with JetStream inside the process, for
// `tollgate dev` and for tests (as nats.go's own tests do). Production edges and apis
// connect to an external NATS 2.10+ cluster instead.
package natsserver

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options of an embedded server.
type Options struct {
	Host     string // Default: 127.0.0.1
	Port     int    // Default: -1 (a free port)
	StoreDir string // JetStream storage; required, so data survives a restart on the same dir
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = -1
	}
	s, err := server.NewServer(&server.Options{
		Host:      o.Host,
		Port:      o.Port,
		JetStream: true,
		StoreDir:  o.StoreDir,
		NoSigs:    true,
		NoLog:     true,
		// JetStream's default of 1 GB in-memory is fine; cap file storage for dev machines.
		JetStreamMaxStore: 8 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server did not start within 10s")
	}
	return s, nil
}
