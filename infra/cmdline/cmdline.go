// Package cmdline is how Tollgate's binaries read their command lines: cobra commands
// built around a command's work, help that lists the TOLLGATE_* variables a command
// reads, and one rule for exit statuses (0 done, 1 failed, 2 used wrongly). It knows
// nothing of what the commands do, so the edge's own binary can link it.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// ConfigDocs is where every variable is described, for the help's pointer to it.
const ConfigDocs = "docs/configuration.md"

// Run adapts a command's work to cobra. Flags and arguments have been checked by the time
// f runs, so an error it returns is the command failing (exit 1), not a usage error; and
// the environment is read only inside f, so help never needs it.
func Run(f func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd.Context(), args); err != nil {
			return &failure{err}
		}
		return nil
	}
}

// failure is an error of a command's work, as opposed to one of its command line.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// NeedsCommand is the RunE of a command that only groups others (tollgate, tollgate
// config): called alone, or with a word that names none of them, it is a usage error.
func NeedsCommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return errors.New("missing command")
}

// Execute runs root with args until ctx ends and returns the process's exit status: 0;
// 1 when the command failed, said on stderr after the command's name; 2 when it was
// used wrongly (unknown command or flag, missing argument), said in one line and
// followed by the command's usage.
func Execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	prepare(root)
	root.SetArgs(args)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if f := (*failure)(nil); errors.As(err, &f) {
		fmt.Fprintf(stderr, "%s: %v\n", topLevel(cmd), f.err)
		return 1
	}
	cmd.InitDefaultHelpFlag() // not yet done when the command line named no command
	fmt.Fprintf(stderr, "%s: %v\n\n%s", cmd.CommandPath(), err, cmd.UsageString())
	return 2
}

// prepare makes root's errors Execute's to print, and its help end with the variables.
func prepare(root *cobra.Command) {
	root.SilenceErrors, root.SilenceUsage = true, true
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		help(c, args)
		if env := c.Annotations[envAnnotation]; env != "" {
			fmt.Fprintf(c.OutOrStdout(), "\nEnvironment (every variable and its default: %s):\n%s", ConfigDocs, env)
		}
	})
}

// topLevel names a failure as the binary always has: the binary and its first command
// ("tollgate billing" for every billing subcommand, "tollgate-edge" for the edge's).
func topLevel(c *cobra.Command) string {
	for c.HasParent() && c.Parent().HasParent() {
		c = c.Parent()
	}
	return c.CommandPath()
}

const envAnnotation = "tollgate.environment"

// Env lists in cmd's help the variables it reads, each with what it sets and its
// default. A name Vars does not describe is a programming error, so it panics: every
// binary's tests build its commands.
func Env(cmd *cobra.Command, names ...string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, n := range names {
		d, ok := Vars[n]
		if !ok {
			panic("cmdline: no description of " + n)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", n, d)
	}
	_ = tw.Flush()
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[envAnnotation] = b.String()
}

// Vars describes the variables commands list in their help, as infra/config's field
// comments do (the variables of billing's Stripe meter and of the config client are
// read by those commands themselves). Only the ones an operator sets first are here; the
// tuning and fault settings are in the configuration docs.
var Vars = map[string]string{
	"TOLLGATE_DATABASE_URL":                         "Postgres [postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable]",
	"TOLLGATE_NATS_URL":                             "NATS [nats://127.0.0.1:4222; embedded in dev]",
	"TOLLGATE_NATS_PREFIX":                          "start of every bucket and stream name [tollgate]",
	"TOLLGATE_NATS_REPLICAS":                        "replicas of every stream and bucket Tollgate creates [1]",
	"TOLLGATE_NATS_CREDS":                           "NATS credentials (JWT + seed) file [unset]",
	"TOLLGATE_CELLS":                                "edge pools: name[=NATS URL];… [unset: one cell, default]",
	"TOLLGATE_EDGE_CELL":                            "the cell whose tenants this edge serves [default]",
	"TOLLGATE_REDIS_URL":                            "Redis for cluster-wide limits [unset: local limits only]",
	"TOLLGATE_REDIS_PREFIX":                         "start of every Redis key [tollgate]",
	"TOLLGATE_ADMIN_TOKEN":                          "the operator's token for the management API [dev: generated and printed]",
	"TOLLGATE_API_ADDR":                             "the management API and console [127.0.0.1:8080]",
	"TOLLGATE_API_ADMIN_ADDR":                       "/metrics, /healthz, /readyz of the api [127.0.0.1:9080]",
	"TOLLGATE_PUBLIC_URL":                           "the console's address in mailed links [http://<api addr>]",
	"TOLLGATE_EDGE_ADDR":                            "the edge's public listener [127.0.0.1:8000]",
	"TOLLGATE_EDGE_ADMIN_ADDR":                      "the edge's /metrics, /healthz, /readyz [127.0.0.1:9000]",
	"TOLLGATE_EDGE_DOMAIN":                          "tenants are served at <slug>.<domain> [localhost]",
	"TOLLGATE_EDGE_TLS_ADDR":                        "the edge's TLS listener [unset: none]",
	"TOLLGATE_EDGE_TLS_CERT":                        "the edge domain's wildcard certificate, with TOLLGATE_EDGE_TLS_KEY [unset]",
	"TOLLGATE_EDGE_ID":                              "this edge's name in usage and metrics [hostname]",
	"TOLLGATE_EDGE_HTTP2":                           "HTTP/2: ALPN h2 on the TLS listener, h2c on the plain one [on]",
	"TOLLGATE_EDGE_CONFIG_STORE":                    "memory, or disk: config in a store in the spool dir, tenants compiled when first used [memory]",
	"TOLLGATE_EDGE_TENANT_MEMORY":                   "disk store: memory of compiled tenants before the idlest are evicted [128MiB]",
	"TOLLGATE_EDGE_FUNCTION_WALL_FACTOR":            "a function's run is cut off after this many times its budget of wall time [4]",
	"TOLLGATE_EDGE_FUNCTION_SKIP_IDLE_CAP":          "a tenant's function cap of at least the cores takes no slot per run [on]",
	"TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK": "a function's request context ends in the run of its last response callback [on]",
	"TOLLGATE_EDGE_FUNCTION_LOCKFREE_RUNS":          "a function's run begins and ends against the watchdog without a lock [on]",
	"TOLLGATE_EDGE_FUNCTION_REUSE_CALLS":            "a request's function call state is reused, not allocated [on]",
	"TOLLGATE_EDGE_FUNCTION_OWN_CONTEXT":            "guest calls run with a context type of the host's own [on]",
	"TOLLGATE_METER":                                "meter usage for billing [on; off for benchmarks only]",
	"TOLLGATE_METER_SPOOL_DIR":                      "usage and config snapshot kept while NATS is away [$XDG_STATE_HOME or the temp dir]",
	"TOLLGATE_UPSTREAM_ALLOW_CIDRS":                 "private ranges upstreams may use [empty: none; dev: 127.0.0.0/8]",
	"TOLLGATE_TRUSTED_PROXIES":                      "proxies whose X-Forwarded-* are believed [empty: none]",
	"TOLLGATE_SMTP_URL":                             "smtp://[user:pass@]host:port [unset: mail is logged, not sent]",
	"TOLLGATE_STRIPE_KEY":                           "Stripe secret key [unset: nothing is pushed to Stripe]",
	"TOLLGATE_STRIPE_URL":                           "Stripe API base URL [Stripe's; e.g. a stripe-mock]",
	"TOLLGATE_STRIPE_EVENT":                         "the Billing Meter's event name [tollgate_requests]",
	"TOLLGATE_STRIPE_FUNCTION_EVENT":                "the function time's Billing Meter event name, in µs [tollgate_function_us]",
	"TOLLGATE_STRIPE_METER":                         "Billing Meter id of the subscriptions' usage prices [the event name's]",
	"TOLLGATE_STRIPE_WEBHOOK_SECRET":                "Stripe webhook signing secret [unset: no webhook served]",
	"TOLLGATE_BILLING_ADMIN_ADDR":                   "/metrics, /healthz, /readyz of billing [127.0.0.1:9090]",
	"TOLLGATE_DEV_UPSTREAM_ADDR":                    "dev's demo upstream, which the demo route calls [127.0.0.1:8090]",
	"TOLLGATE_DEV_STATE":                            "dev's admin token and demo key, kept across restarts [~/.local/state/tollgate/dev.json; off]",
	"TOLLGATE_DB_TIMEOUT":                           "bound of one database call [5s]",
	"TOLLGATE_OTEL_ENDPOINT":                        "OTLP/HTTP trace collector [unset: no spans]",
	"TOLLGATE_LOG_LEVEL":                            "debug, info, warn or error [info]",
	"TOLLGATE_API_URL":                              "the management API, for the config client [http://127.0.0.1:8080]",
	"TOLLGATE_TOKEN":                                "the config client's API token [TOLLGATE_ADMIN_TOKEN]",
}
