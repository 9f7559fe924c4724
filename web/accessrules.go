package web

import (
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
	"tollgate/tenants/rbac"
)

// The tenant's access rules as two texts: rules, one "subject, path, action[, effect]"
// a line, and role links, one "member, role" a line; blank lines and # comments are
// skipped. It is validated by the engine the edges run (accessrules.Compile), as the API
// does, and an error is shown on the line it is about.

type accessRuleLine struct {
	N     int // 1-based line of the text
	Text  string
	Error string
}

type accessRulesForm struct {
	Version      string
	Rules, Roles string
	Exists       bool
	Errors       map[string]string
	// RuleLines and RoleLines list the lines of a text with an error, the bad one marked.
	RuleLines, RoleLines []accessRuleLine
}

// parseLines splits a text into rows of comma-separated fields and the text line of each.
func parseLines(s string) ([][]string, []int) {
	rows, at := [][]string{}, []int{}
	for i, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ",")
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		rows, at = append(rows, f), append(at, i+1)
	}
	return rows, at
}

func joinLines(rows [][]string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, ", "))
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	accessRulesFieldRE = regexp.MustCompile(`^(rules|roles)\[(\d+)\](?:\[(\d+)\])?`)
	accessRulesRefRE   = regexp.MustCompile(`(rules|roles)\[(\d+)\]`)
	ruleColumns        = []string{"subject", "path", "action", "effect"}
	roleColumns        = []string{"member", "role"}
)

// accessRulesError puts a compile error on the line it names.
func accessRulesError(err error, f *accessRulesForm, ruleAt, roleAt []int) bool {
	var te *tenants.Error
	if !errors.As(err, &te) || te.Code == tenants.EInternal {
		return false
	}
	lineOf := func(list string, i int) int {
		at := ruleAt
		if list == "roles" {
			at = roleAt
		}
		if i >= 0 && i < len(at) {
			return at[i]
		}
		return i + 1
	}
	msg := accessRulesRefRE.ReplaceAllStringFunc(te.Message, func(ref string) string {
		m := accessRulesRefRE.FindStringSubmatch(ref)
		i, _ := strconv.Atoi(m[2])
		return "line " + strconv.Itoa(lineOf(m[1], i))
	})
	m := accessRulesFieldRE.FindStringSubmatch(te.Field)
	if m == nil {
		key := te.Field
		if key != "rules" && key != "roles" {
			key = "form"
		}
		f.Errors[key] = msg
		return true
	}
	i, _ := strconv.Atoi(m[2])
	line := lineOf(m[1], i)
	prefix := "Line " + strconv.Itoa(line)
	if m[3] != "" {
		cols := ruleColumns
		if m[1] == "roles" {
			cols = roleColumns
		}
		if c, _ := strconv.Atoi(m[3]); c < len(cols) {
			prefix += " (" + cols[c] + ")"
		}
	}
	f.Errors[m[1]] = prefix + ": " + msg
	text := f.Rules
	if m[1] == "roles" {
		text = f.Roles
	}
	var out []accessRuleLine
	for n, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == "" && n+1 != line {
			continue
		}
		pl := accessRuleLine{N: n + 1, Text: l}
		if n+1 == line {
			pl.Error = msg
		}
		out = append(out, pl)
	}
	if m[1] == "roles" {
		f.RoleLines = out
	} else {
		f.RuleLines = out
	}
	return true
}

func (c *Console) accessRulesPage(ctx *fiber.Ctx) error {
	f := accessRulesForm{Errors: map[string]string{}, Version: "0"}
	if c.cfg.AccessRules != nil {
		p, err := c.cfg.AccessRules.FindAccessRules(c.ctx(ctx), tenantOf(ctx).ID)
		switch {
		case err == nil:
			f.Rules, f.Roles, f.Version, f.Exists = joinLines(p.Rules), joinLines(p.Roles), strconv.FormatInt(p.Version, 10), true
		case tenants.ErrorCode(err) != tenants.ENotFound:
			return c.internal(ctx, err)
		}
	}
	return c.render(ctx, http.StatusOK, "policy", page{Title: "Policy", Nav: "policy", Form: f, Data: c.cfg.AccessRules != nil})
}

func (c *Console) accessRulesSave(ctx *fiber.Ctx) error {
	if c.cfg.AccessRules == nil {
		return c.notFound(ctx, nil)
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	f := accessRulesForm{Version: ctx.FormValue("version"), Rules: ctx.FormValue("rules"), Roles: ctx.FormValue("roles"), Errors: map[string]string{}}
	f.Exists = f.Version != "" && f.Version != "0"
	rules, ruleAt := parseLines(f.Rules)
	roles, roleAt := parseLines(f.Roles)
	_, err := accessrules.Compile(rules, roles)
	if err == nil {
		v, _ := strconv.ParseInt(f.Version, 10, 64)
		p := &tenants.AccessRules{TenantID: tv.ID, Rules: rules, Roles: roles, Version: v}
		err = c.cfg.AccessRules.PutAccessRules(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("policy", tenants.AuditUpdate), ""), p)
		if err == nil {
			return ctx.Redirect(c.tenantURL(ctx, "/policy?done=policy-saved"), http.StatusSeeOther)
		}
	}
	if tenants.ErrorCode(err) == tenants.EVersionConflict {
		f.Errors["form"] = "Someone changed the policy since you opened it. Reload the page to see their change, then edit again."
	} else if !accessRulesError(err, &f, ruleAt, roleAt) {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "policy", page{Title: "Policy", Nav: "policy", Form: f, Data: true})
}
