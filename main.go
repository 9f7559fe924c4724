// Command tollgate is the whole product in one binary; the first argument picks the part.
// The files beside this one wire Tollgate's concrete parts into those commands: this is the
// only package that imports both the domain implementations (Postgres, NATS) and the
// servers (api, billing). The edge's wiring is edgecmd's, which needs no store, so that
// tollgate-edge (cmd/tollgate-edge) can link the edge alone. End-to-end tests start the
// built binaries. Every command is a cobra command around a function of a context and
// its arguments (infra/cmdline), each of which reads top to bottom.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	billingcli "tollgate/billing/cli"
	"tollgate/edge/edgecmd"
	"tollgate/infra/cmdline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cmdline.Execute(ctx, rootCommand(), os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// rootCommand is `tollgate` and every command under it.
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "Tollgate, a multi-tenant API gateway",
		Long: `Tollgate is a multi-tenant API gateway: the management API and console, the edges that
serve tenants' traffic, and billing, in one binary whose first argument picks the part.
"tollgate dev" runs them all in one process, with a demo tenant to call.

Configuration is read from TOLLGATE_* environment variables: each command's --help lists
the ones it reads, and ` + cmdline.ConfigDocs + ` describes them all.`,
		RunE: cmdline.NeedsCommand,
	}
	root.AddCommand(devCommand(), apiCommand(), edgecmd.Command(), billingcli.Command(), migrateCommand(), configCommand())
	return root
}
