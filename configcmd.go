package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"tollgate/infra/cmdline"
	"tollgate/infra/devstate"
	"tollgate/tenants"
)

// The config command is a client of the management API: it exports a tenant's config
// document and applies one (GET and PUT /v1/tenants/{slug}/config), for CI jobs that
// keep the document in git. It reads the API's address and a token from flags or the
// environment, and talks to nothing else.

func configCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "exports or applies a tenant's config document (config export|apply)",
		Long: `config is a client of the management API: it exports a tenant's config document and
applies one (GET and PUT /v1/tenants/{slug}/config), for CI jobs that keep the
document in git. --api defaults to $TOLLGATE_API_URL, else http://127.0.0.1:8080;
--token to $TOLLGATE_TOKEN, else $TOLLGATE_ADMIN_TOKEN. Without either, a running
"tollgate dev" stack's API and admin token are used.`,
		RunE: cmdline.NeedsCommand,
	}
	cmdline.Env(c, "TOLLGATE_API_URL", "TOLLGATE_TOKEN", "TOLLGATE_ADMIN_TOKEN")
	c.AddCommand(configExportCommand(), configApplyCommand())
	return c
}

// apiClient is where the API is and how to authenticate to it.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// clientFlags adds --api and --token to cmd. Their defaults come from the environment
// when the command runs (resolve), so help shows no token.
func clientFlags(cmd *cobra.Command) *apiClient {
	c := &apiClient{http: &http.Client{Timeout: 2 * time.Minute}}
	cmd.Flags().StringVar(&c.base, "api", "", "management API URL (default $TOLLGATE_API_URL, else http://127.0.0.1:8080)")
	cmd.Flags().StringVar(&c.token, "token", "", "management API token (default $TOLLGATE_TOKEN, else $TOLLGATE_ADMIN_TOKEN)")
	return c
}

// resolve fills what the flags left unset from the environment.
func (c *apiClient) resolve() *apiClient {
	for _, v := range []struct {
		dst   *string
		names []string
	}{
		{&c.base, []string{"TOLLGATE_API_URL"}},
		{&c.token, []string{"TOLLGATE_TOKEN", "TOLLGATE_ADMIN_TOKEN"}},
	} {
		for _, n := range v.names {
			if *v.dst == "" {
				*v.dst = os.Getenv(n)
			}
		}
	}
	// Neither set: a running `tollgate dev` is the API a newcomer means.
	if dev, ok := devstate.Running(os.Getenv); ok && (c.base == "" || c.token == "") {
		if c.base == "" {
			c.base = dev.APIURL
		}
		if c.token == "" && c.base == dev.APIURL {
			c.token = dev.AdminToken
		}
	}
	if c.base == "" {
		c.base = "http://127.0.0.1:8080"
	}
	return c
}

// do sends one request and returns the body of a 2xx answer; any other answer is an
// error carrying the API's own message.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte, header ...string) ([]byte, error) {
	if c.token == "" {
		return nil, errors.New("no token: pass --token or set TOLLGATE_TOKEN (or TOLLGATE_ADMIN_TOKEN)")
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.base, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 == 2 {
		return out, nil
	}
	var e struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	if json.Unmarshal(out, &e) != nil || e.Error.Code == "" {
		return nil, fmt.Errorf("%s %s: %s", method, path, res.Status)
	}
	if e.Error.Field != "" {
		return nil, fmt.Errorf("%s: %s: %s", e.Error.Code, e.Error.Field, e.Error.Message)
	}
	return nil, fmt.Errorf("%s: %s", e.Error.Code, e.Error.Message)
}

func configExportCommand() *cobra.Command {
	var slug, format string
	c := &cobra.Command{
		Use:   "export --tenant <slug> [-o yaml|json]",
		Short: "print a tenant's config document",
		Args:  cobra.NoArgs,
	}
	client := clientFlags(c)
	c.Flags().StringVar(&slug, "tenant", "", "the tenant's slug")
	c.Flags().StringVarP(&format, "output", "o", "yaml", "output format: yaml or json")
	_ = c.MarkFlagRequired("tenant")
	cmdline.Env(c, "TOLLGATE_API_URL", "TOLLGATE_TOKEN", "TOLLGATE_ADMIN_TOKEN")
	c.RunE = cmdline.Run(func(ctx context.Context, _ []string) error {
		return configExport(ctx, client.resolve(), slug, format, os.Stdout)
	})
	return c
}

func configExport(ctx context.Context, c *apiClient, slug, format string, stdout io.Writer) error {
	accept := map[string]string{"yaml": "application/yaml", "json": "application/json"}[format]
	if accept == "" {
		return fmt.Errorf("-o must be yaml or json, got %q", format)
	}
	out, err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(slug)+"/config", nil, "Accept", accept)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// applyFlags are config apply's flags.
type applyFlags struct {
	file, slug        string
	dry, prune, force bool
}

func configApplyCommand() *cobra.Command {
	var f applyFlags
	c := &cobra.Command{
		Use:   "apply -f <file> [--tenant <slug>] [--dry-run] [--prune] [--force]",
		Short: "apply a config document to its tenant",
		Long: `apply reads the tenant from the document unless --tenant is given, and -f - reads
standard input. It prints what changed, or with --dry-run what would.`,
		Args: cobra.NoArgs,
	}
	client := clientFlags(c)
	c.Flags().StringVarP(&f.file, "file", "f", "", "the document (YAML or JSON); - for standard input")
	c.Flags().StringVar(&f.slug, "tenant", "", "the tenant's slug (default: the document's)")
	c.Flags().BoolVar(&f.dry, "dry-run", false, "say what would change, change nothing")
	c.Flags().BoolVar(&f.prune, "prune", false, "delete the objects the document leaves out")
	c.Flags().BoolVar(&f.force, "force", false, "apply even if the config changed since the document's export")
	_ = c.MarkFlagRequired("file")
	cmdline.Env(c, "TOLLGATE_API_URL", "TOLLGATE_TOKEN", "TOLLGATE_ADMIN_TOKEN")
	c.RunE = cmdline.Run(func(ctx context.Context, _ []string) error {
		return configApply(ctx, client.resolve(), f, os.Stdin, os.Stdout)
	})
	return c
}

func configApply(ctx context.Context, c *apiClient, f applyFlags, stdin io.Reader, stdout io.Writer) error {
	var doc []byte
	var err error
	switch f.file {
	case "-":
		doc, err = io.ReadAll(stdin)
	default:
		doc, err = os.ReadFile(f.file)
	}
	if err != nil {
		return err
	}
	slug := f.slug
	if slug == "" {
		var head struct {
			Tenant string `json:"tenant"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil || head.Tenant == "" {
			return fmt.Errorf("%s names no tenant: pass --tenant", f.file)
		}
		slug = head.Tenant
	}
	ct := "application/yaml" // JSON is YAML too; the API reads either the same way
	if t := bytes.TrimSpace(doc); len(t) > 0 && t[0] == '{' {
		ct = "application/json"
	}
	q := url.Values{}
	for name, on := range map[string]bool{"dry_run": f.dry, "prune": f.prune, "force": f.force} {
		if on {
			q.Set(name, "true")
		}
	}
	path := "/v1/tenants/" + url.PathEscape(slug) + "/config"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	out, err := c.do(ctx, http.MethodPut, path, doc, "Content-Type", ct)
	if err != nil {
		return err
	}
	var plan tenants.ConfigPlan
	if err := json.Unmarshal(out, &plan); err != nil {
		return fmt.Errorf("the API's answer is not a plan: %v", err)
	}
	printPlan(stdout, slug, &plan)
	return nil
}

// printPlan says what an apply did, or would do: one line per object, + created,
// ~ changed, - deleted.
func printPlan(w io.Writer, slug string, p *tenants.ConfigPlan) {
	if p.Changes() == 0 {
		fmt.Fprintf(w, "%s: no changes (%d unchanged, revision %s)\n", slug, p.Unchanged, p.Revision)
		return
	}
	for _, l := range []struct {
		sign string
		list []tenants.ConfigChange
	}{{"+", p.Created}, {"~", p.Updated}, {"-", p.Deleted}} {
		for _, c := range l.list {
			fmt.Fprintf(w, "%s %s %s\n", l.sign, c.Kind, c.Name)
		}
	}
	if p.Applied {
		fmt.Fprintf(w, "%s: %d created, %d changed, %d deleted, %d unchanged (revision %s)\n",
			slug, len(p.Created), len(p.Updated), len(p.Deleted), p.Unchanged, p.Revision)
		return
	}
	fmt.Fprintf(w, "%s: dry run: %d to create, %d to change, %d to delete, %d unchanged; nothing changed\n",
		slug, len(p.Created), len(p.Updated), len(p.Deleted), p.Unchanged)
}
