package tenants

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Config as code: a tenant's whole config as one document a platform team keeps in git
// and applies from CI (GET and PUT /v1/tenants/{slug}/config, `tollgate config`). The
// objects in it are the domain types themselves, as the API takes them: what a request may
// not set (ids, versions, timestamps: the readonly fields) is left out, and so is what is
// no config (API keys, which are secrets shown once; an issuer's HS256 secret on export; a
// domain's certificate and key). Objects are named, not numbered: routes, consumers and
// plans by name, JWT issuers by issuer, domains by host name; each list is sorted so, and
// the same state always exports to the same bytes.

// ConfigDocumentVersion is the version of the document's layout this server writes and
// reads.
const ConfigDocumentVersion = 1

// ConfigDocument is a tenant's config as code. A list left out (or null) is not managed
// by the document: apply leaves that kind alone, prune included; an empty list manages it
// as empty. Likewise a document without policy leaves the tenant's access rules as they are.
type ConfigDocument struct {
	Version int    `json:"version" required:"true" doc:"The document's layout: 1."`
	Tenant  string `json:"tenant" required:"true" doc:"The slug of the tenant the document is of; applying it to another tenant is refused."`
	// Revision stamps the state exported (ConfigRevision); apply refuses a document whose
	// revision is not current, unless forced, so an edit of a stale copy does not undo
	// changes made since.
	Revision    string           `json:"revision,omitempty" doc:"Opaque stamp of the state exported. Apply refuses a document whose revision is no longer current (409 version_conflict) unless forced; without one, no check is made."`
	Routes      []*Route         `json:"routes" doc:"Routes, by name."`
	Consumers   []*Consumer      `json:"consumers" doc:"Consumers, by name. Their API keys are not config: they are created and revoked through .../keys."`
	Plans       []*ConsumerPlan  `json:"plans" doc:"Plans, by name."`
	JWTIssuers  []*Issuer        `json:"jwt_issuers" doc:"JWT issuers, by issuer. Export leaves hs256_secret out; on apply, an issuer with no key source keeps the stored secret."`
	AccessRules *AccessRules     `json:"policy,omitempty" doc:"The tenant's policy; absent: left as it is."`
	Domains     []ConfigDomain   `json:"domains" doc:"Custom domains, by host name. Apply keeps or (with prune) removes them; a domain is claimed with its certificate through .../domains."`
	Functions   []ConfigFunction `json:"functions" doc:"Functions, by name, each with the sha256 of its current version. The modules are uploaded through .../functions/{name}; apply makes an uploaded version current (or, with prune, deletes the functions left out), and a sha256 the tenant never uploaded under that name is refused."`
}

// ConfigFunction is a function as the document names it: its module is uploaded through
// the functions API (bytes do not belong in git), and the document says which uploaded
// version is current, the one a route naming the function without a digest runs.
type ConfigFunction struct {
	Name   string `json:"name" required:"true"`
	SHA256 string `json:"sha256" required:"true" doc:"Hex SHA-256 of the version to make current; one the tenant uploaded under this name."`
}

// ConfigDomain is a custom domain as the document names it. Its certificate and key are
// not kept in git, so a domain is claimed through the domains API, and the document only
// keeps it (or drops it, with prune); its status is the DNS proof's, shown on export and
// ignored on apply, so an exported document applies as it is.
type ConfigDomain struct {
	Hostname string `json:"hostname" required:"true"`
	Status   string `json:"status,omitempty" doc:"pending or verified, as exported; ignored on apply."`
}

// Kinds of object in a ConfigChange, as the document names its lists (singular).
const (
	ConfigKindRoute       = "route"
	ConfigKindConsumer    = "consumer"
	ConfigKindPlan        = "plan"
	ConfigKindJWTIssuer   = "jwt_issuer"
	ConfigKindAccessRules = "policy"
	ConfigKindDomain      = "domain"
	ConfigKindFunction    = "function"
)

// ConfigChange names one object an apply creates, updates or deletes.
type ConfigChange struct {
	Kind string `json:"kind" enum:"route,consumer,plan,jwt_issuer,policy,domain,function"`
	Name string `json:"name" doc:"The object's name (an issuer's issuer, a domain's host name; the policy's is policy)."`
}

// ConfigPlan is what an apply does (or, dry, would do).
type ConfigPlan struct {
	Created   []ConfigChange `json:"created"`
	Updated   []ConfigChange `json:"updated"`
	Deleted   []ConfigChange `json:"deleted" doc:"Only with prune."`
	Unchanged int            `json:"unchanged" doc:"Objects of the document equal to what is stored."`
	Applied   bool           `json:"applied" doc:"Whether the changes were made: false on a dry run and when there are none."`
	Revision  string         `json:"revision" doc:"The revision of the state after the apply (the current one when nothing was applied)."`
}

// Changes counts the plan's creates, updates and deletes.
func (p *ConfigPlan) Changes() int { return len(p.Created) + len(p.Updated) + len(p.Deleted) }

// ApplyOptions modify ApplyConfig.
type ApplyOptions struct {
	DryRun bool // check everything, change nothing
	Prune  bool // delete the objects of managed kinds that the document leaves out
	Force  bool // apply even when the document's revision is stale
}

// ConfigService exports and applies a tenant's config document.
type ConfigService interface {
	// ExportConfig returns the tenant's config document, sorted, with its revision:
	// ENotFound (tenant).
	ExportConfig(ctx context.Context, tenantID string) (*ConfigDocument, error)
	// ApplyConfig makes the tenant's config what doc says, in one transaction (one burst
	// of config entries, one audit entry of ctx's), and answers what it did. The
	// caller has validated doc's access rules (accessrules.Compile, field "policy…"); the
	// objects are validated here as their own writes do, with errors naming the document
	// path ("routes[3].upstream.targets[0].url"). EValidation (also when doc is of another
	// tenant), EConflict, EVersionConflict (a stale revision, unless o.Force), ENotFound
	// (tenant).
	ApplyConfig(ctx context.Context, tenantID string, doc *ConfigDocument, o ApplyOptions) (*ConfigPlan, error)
}

// CheckNames refuses a document that names an object twice, or a domain by no name; the
// error names the later occurrence.
func (d *ConfigDocument) CheckNames() error {
	if d.Version != ConfigDocumentVersion {
		return Invalid("version", "must be %d, got %d", ConfigDocumentVersion, d.Version)
	}
	check := func(list string, n int, name func(int) string, field string) error {
		seen := make(map[string]bool, n)
		for i := range n {
			k := name(i)
			if seen[k] && k != "" {
				return Invalid(fmt.Sprintf("%s[%d].%s", list, i, field), "%q is in the document twice", k)
			}
			seen[k] = true
		}
		return nil
	}
	for _, c := range []struct {
		list, field string
		n           int
		name        func(int) string
		nilAt       func(int) bool
	}{
		{"routes", "name", len(d.Routes), func(i int) string { return d.Routes[i].Name }, func(i int) bool { return d.Routes[i] == nil }},
		{"consumers", "name", len(d.Consumers), func(i int) string { return d.Consumers[i].Name }, func(i int) bool { return d.Consumers[i] == nil }},
		{"plans", "name", len(d.Plans), func(i int) string { return d.Plans[i].Name }, func(i int) bool { return d.Plans[i] == nil }},
		{"jwt_issuers", "issuer", len(d.JWTIssuers), func(i int) string { return d.JWTIssuers[i].Issuer }, func(i int) bool { return d.JWTIssuers[i] == nil }},
	} {
		for i := range c.n {
			if c.nilAt(i) {
				return Invalid(fmt.Sprintf("%s[%d]", c.list, i), "must be an object, not null")
			}
		}
		if err := check(c.list, c.n, c.name, c.field); err != nil {
			return err
		}
	}
	for i, dm := range d.Domains {
		if dm.Hostname == "" {
			return Invalid(fmt.Sprintf("domains[%d].hostname", i), "is required")
		}
	}
	for i := range d.Functions {
		f := &d.Functions[i]
		if err := ValidateFunctionName(f.Name); err != nil {
			return Invalid(fmt.Sprintf("functions[%d].name", i), "%v", err)
		}
		f.SHA256 = strings.ToLower(f.SHA256)
		if !ValidDigest(f.SHA256) {
			return Invalid(fmt.Sprintf("functions[%d].sha256", i), "must be 64 hex digits (the module's sha256)")
		}
	}
	if err := check("functions", len(d.Functions), func(i int) string { return d.Functions[i].Name }, "name"); err != nil {
		return err
	}
	return check("domains", len(d.Domains), func(i int) string { return strings.ToLower(d.Domains[i].Hostname) }, "hostname")
}

// Sort orders each list by name, as export writes it.
func (d *ConfigDocument) Sort() {
	slices.SortFunc(d.Routes, func(a, b *Route) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(d.Consumers, func(a, b *Consumer) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(d.Plans, func(a, b *ConsumerPlan) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(d.JWTIssuers, func(a, b *Issuer) int { return strings.Compare(a.Issuer, b.Issuer) })
	slices.SortFunc(d.Domains, func(a, b ConfigDomain) int { return strings.Compare(a.Hostname, b.Hostname) })
	slices.SortFunc(d.Functions, func(a, b ConfigFunction) int { return strings.Compare(a.Name, b.Name) })
}

// AtPath is err with its field placed under path, the object's place in a document:
// "paths[0]" of routes[3] becomes "routes[3].paths[0]", and an error of no field names
// the object. Other errors are returned as they are.
func AtPath(path string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	switch {
	case c.Field == "":
		c.Field = path
	case strings.HasPrefix(c.Field, "["):
		c.Field = path + c.Field
	default:
		c.Field = path + "." + c.Field
	}
	return &c
}

// MarshalJSON writes the document's members and each object's in their
// declaration order, without the objects' read-only fields. A nil list is left out (the
// document does not manage it); an empty one is [].
func (d ConfigDocument) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	v := reflect.ValueOf(d)
	t := v.Type()
	first := true
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Pointer) && fv.IsNil() ||
			strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		var raw []byte
		var err error
		switch fv.Kind() {
		case reflect.Slice:
			raw, err = writableList(fv)
		case reflect.Pointer:
			raw, err = WritableJSON(fv.Interface())
		default:
			raw, err = json.Marshal(fv.Interface())
		}
		if err != nil {
			return nil, err
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&buf, "%q:", name)
		buf.Write(raw)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func writableList(list reflect.Value) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			buf.WriteByte(',')
		}
		raw, err := WritableJSON(list.Index(i).Interface())
		if err != nil {
			return nil, err
		}
		buf.Write(raw)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// WritableJSON is v's JSON without the fields tagged readonly: what a client may send
// of it, in the order of v's fields. v is a struct or a pointer to one.
func WritableJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || bytes.Equal(b, []byte("null")) {
		return b, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		raw, ok := m[name]
		if !ok || f.Tag.Get("readonly") == "true" {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&buf, "%q:", name)
		buf.Write(raw)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
