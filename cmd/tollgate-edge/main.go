// Command tollgate-edge is tollgate's edge command on its own: the same process as
// `tollgate edge`, configured by the same TOLLGATE_* variables, in a binary that links
// only the edge. An edge then maps and initialises none of the api's, the console's or
// billing's code (about 11 MiB less RSS, see the README's Performance section), and a
// compromised edge holds none of it. The image ships both binaries; the deploy files run
// this one for the edge.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"tollgate/edge/edgecmd"
	"tollgate/infra/cmdline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := edgecmd.Command()
	cmd.Use = "tollgate-edge"
	code := cmdline.Execute(ctx, cmd, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
