package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"tollgate/tenants"
)

// The config command is a client of the management API: it exports a tenant's config
// document and applies one (GET and PUT /v1/tenants/{slug}/config), for CI jobs that
// keep the document in git. It reads the API's address and a token from flags or the
// environment, and talks to nothing else.

const configUsage = `usage:
  tollgate config export --tenant <slug> [-o yaml|json] [--api URL] [--token T]
  tollgate config apply -f <file> [--tenant <slug>] [--dry-run] [--prune] [--force] [--api URL] [--token T]

--api defaults to $TOLLGATE_API_URL, else http://127.0.0.1:8080; --token to
$TOLLGATE_TOKEN, else $TOLLGATE_ADMIN_TOKEN. apply reads the tenant from the document
unless --tenant is given, and -f - reads standard input.
`

// ConfigCmd runs "tollgate config export|apply".
func ConfigCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, configUsage)
		return errors.New("export or apply?")
	}
	switch args[0] {
	case "export":
		return configExport(ctx, args[1:], os.Stdout)
	case "apply":
		return configApply(ctx, args[1:], os.Stdin, os.Stdout)
	}
	fmt.Fprint(os.Stderr, configUsage)
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// apiClient is where the API is and how to authenticate to it.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

func clientFlags(fs *flag.FlagSet) *apiClient {
	c := &apiClient{http: &http.Client{Timeout: 2 * time.Minute}}
	base := os.Getenv("TOLLGATE_API_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	token := os.Getenv("TOLLGATE_TOKEN")
	if token == "" {
		token = os.Getenv("TOLLGATE_ADMIN_TOKEN")
	}
	fs.StringVar(&c.base, "api", base, "management API URL")
	fs.StringVar(&c.token, "token", token, "management API token")
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

func configExport(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("config export", flag.ContinueOnError)
	c := clientFlags(fs)
	slug := fs.String("tenant", "", "the tenant's slug")
	format := fs.String("o", "yaml", "output format: yaml or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *slug == "" {
		return errors.New("--tenant is required")
	}
	accept := map[string]string{"yaml": "application/yaml", "json": "application/json"}[*format]
	if accept == "" {
		return fmt.Errorf("-o must be yaml or json, got %q", *format)
	}
	out, err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(*slug)+"/config", nil, "Accept", accept)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func configApply(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("config apply", flag.ContinueOnError)
	c := clientFlags(fs)
	file := fs.String("f", "", "the document (YAML or JSON); - for standard input")
	slug := fs.String("tenant", "", "the tenant's slug (default: the document's)")
	dry := fs.Bool("dry-run", false, "say what would change, change nothing")
	prune := fs.Bool("prune", false, "delete the objects the document leaves out")
	force := fs.Bool("force", false, "apply even if the config changed since the document's export")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var doc []byte
	var err error
	switch *file {
	case "":
		return errors.New("-f is required")
	case "-":
		doc, err = io.ReadAll(stdin)
	default:
		doc, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	if *slug == "" {
		var head struct {
			Tenant string `json:"tenant"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil || head.Tenant == "" {
			return fmt.Errorf("%s names no tenant: pass --tenant", *file)
		}
		*slug = head.Tenant
	}
	ct := "application/yaml" // JSON is YAML too; the API reads either the same way
	if t := bytes.TrimSpace(doc); len(t) > 0 && t[0] == '{' {
		ct = "application/json"
	}
	q := url.Values{}
	for name, on := range map[string]bool{"dry_run": *dry, "prune": *prune, "force": *force} {
		if on {
			q.Set(name, "true")
		}
	}
	path := "/v1/tenants/" + url.PathEscape(*slug) + "/config"
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
	printPlan(stdout, *slug, &plan)
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
