// Command tollgate is the whole product in one binary; the first argument picks the part.
// The files beside this one wire Tollgate's concrete parts into those commands: this is the
// only package that imports both the domain implementations (Postgres, NATS) and the
// servers (api, billing). The edge's wiring is edgecmd's, which needs no store, so that
// tollgate-edge (cmd/tollgate-edge) can link the edge alone. End-to-end tests start the
// built binaries; each command (program.go, dev.go, edgecmd) reads top to bottom.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"tollgate/edge/edgecmd"
)

const usage = `usage: tollgate <command> [flags]

commands:
  dev       the whole stack in one process: api + console, edge, billing, embedded NATS
  api       the management API and the outbox relay   (--resync rebuilds the KV bucket)
  edge      the data plane: proxies tenant traffic from the KV config
  billing   folds usage batches into Postgres rollups
  migrate   applies database migrations and exits
  config    exports or applies a tenant's config document (config export|apply)

configuration is read from TOLLGATE_* environment variables (see README.md)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run, ok := map[string]func(context.Context, []string) error{
		"dev":     Dev,
		"api":     API,
		"edge":    edgecmd.Run,
		"billing": Billing,
		"migrate": Migrate,
		"config":  ConfigCmd,
	}[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tollgate: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err := run(ctx, os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "tollgate %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
