package main

import (
	"github.com/nats-io/nats.go"

	"tollgate/infra/config"
	tgnats "tollgate/tenants/nats"
)

// natsAuth is the sign-in and TLS every process connects to NATS with.
func natsAuth(cfg *config.Config) tgnats.Auth {
	return tgnats.Auth{
		Creds:   cfg.NATSCreds,
		NKey:    cfg.NATSNKey,
		TLSCA:   cfg.NATSTLSCA,
		TLSCert: cfg.NATSTLSCert,
		TLSKey:  cfg.NATSTLSKey,
	}
}

// connectNATS connects a process named name to servers (a list of a cluster's) the one
// way every Tollgate process does: tgnats.Connect's reconnect settings, cfg's credentials
// and TLS. A malformed list or an unreadable credentials, key or certificate file is an
// error here, at start.
func connectNATS(cfg *config.Config, servers, name string) (*nats.Conn, error) {
	return tgnats.ConnectAuth(servers, name, natsAuth(cfg))
}
