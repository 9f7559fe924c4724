package openapiimport

import (
	"fmt"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"tollgate/tenants"
)

// What the edge checks, from what the document's security schemes ask for:
//   - apiKey in the X-API-Key header: key (the edge reads a consumer's key there);
//   - http bearer (JWT or any format), oauth2 and openIdConnect: jwt (a bearer token
//     signed by one of the tenant's JWT issuers);
//   - a requirement offering both (security: [{apiKey}, {bearer}]): key_or_jwt;
//   - no requirement, or an empty one ({}) among those offered: none.
//
// Any other scheme (http basic, an API key in a query or cookie or another header,
// mutualTLS) is one the edge cannot check: an operation that asks only for such schemes
// keeps its path from being imported unless the import's auth is set, since importing it
// open would expose what the document protects.

// authRank orders the modes by how much they demand; key and jwt demand as much, and
// differently.
var authRank = map[string]int{tenants.AuthNone: 0, tenants.AuthKeyOrJWT: 1, tenants.AuthKey: 2, tenants.AuthJWT: 2}

// pathAuth is the auth of the route of path p: its operations' auth when they agree, else
// the strictest (noted), and key_or_jwt when some operations ask for a key and others for
// a JWT, the one mode that lets each operation's callers through. why is set when an
// operation's security cannot be checked by the edge.
func pathAuth(t *openapi3.T, p string, item *openapi3.PathItem, ms []string, notes []Note) (auth, why string, _ []Note) {
	byMethod := map[string]string{}
	modes := map[string]bool{}
	for _, m := range ms {
		op := item.GetOperation(m)
		if op == nil {
			continue
		}
		reqs := t.Security
		if op.Security != nil {
			reqs = *op.Security
		}
		mode, note, err := requirementsAuth(t, reqs)
		if err != "" {
			return "", fmt.Sprintf("%s: %s; set auth in the import to import it anyway", m, err), notes
		}
		if note != "" {
			notes = append(notes, Note{Path: p, Message: m + ": " + note})
		}
		byMethod[m], modes[mode] = mode, true
	}
	if len(modes) == 0 {
		return tenants.AuthNone, "", notes
	}
	if len(modes) == 1 {
		for m := range modes {
			return m, "", notes
		}
	}
	switch {
	case modes[tenants.AuthKey] && modes[tenants.AuthJWT], modes[tenants.AuthKeyOrJWT] && (modes[tenants.AuthKey] || modes[tenants.AuthJWT]):
		auth = tenants.AuthKeyOrJWT
	default:
		for m := range modes {
			if authRank[m] > authRank[auth] || auth == "" {
				auth = m
			}
		}
	}
	var each []string
	for _, m := range ms {
		if a, ok := byMethod[m]; ok {
			each = append(each, m+" "+a)
		}
	}
	notes = append(notes, Note{Path: p, Message: fmt.Sprintf("its operations differ in auth (%s): the route takes %s for all of them", strings.Join(each, ", "), auth)})
	return auth, "", notes
}

// requirementsAuth is the mode of one operation's security requirements (alternatives,
// each a set of schemes that must all be met), with a note when the edge checks less
// than a requirement asks, or why the edge cannot check it at all.
func requirementsAuth(t *openapi3.T, reqs openapi3.SecurityRequirements) (mode, note, why string) {
	if len(reqs) == 0 {
		return tenants.AuthNone, "", ""
	}
	offered := map[string]bool{}
	var unchecked []string
	for _, req := range reqs {
		if len(req) == 0 {
			return tenants.AuthNone, "", "" // {} among the alternatives: anonymous calls are allowed
		}
		names := make([]string, 0, len(req))
		for name := range req {
			names = append(names, name)
		}
		slices.Sort(names)
		got := map[string]bool{}
		bad := ""
		for _, name := range names {
			m, desc := schemeAuth(t, name)
			if m == "" {
				bad = desc
				break
			}
			got[m] = true
		}
		switch {
		case bad != "":
			unchecked = append(unchecked, bad)
		case len(got) > 1:
			// A key and a JWT together: the edge checks one credential per request.
			offered[tenants.AuthKeyOrJWT] = true
			note = "a requirement asks for a key and a JWT together; the edge checks either"
		default:
			for m := range got {
				offered[m] = true
			}
		}
	}
	switch {
	case offered[tenants.AuthKeyOrJWT] || offered[tenants.AuthKey] && offered[tenants.AuthJWT]:
		mode = tenants.AuthKeyOrJWT
	case offered[tenants.AuthKey]:
		mode = tenants.AuthKey
	case offered[tenants.AuthJWT]:
		mode = tenants.AuthJWT
	default:
		return "", "", "its security (" + strings.Join(unchecked, "; ") + ") is not one the edge checks"
	}
	if len(unchecked) > 0 && note == "" {
		note = "alternatives the edge does not check are left out: " + strings.Join(unchecked, "; ")
	}
	return mode, note, ""
}

// schemeAuth is the mode that checks the scheme named name, or "" and what the scheme is.
func schemeAuth(t *openapi3.T, name string) (string, string) {
	var s *openapi3.SecurityScheme
	if t.Components != nil {
		if ref := t.Components.SecuritySchemes[name]; ref != nil {
			s = ref.Value
		}
	}
	if s == nil {
		return "", fmt.Sprintf("%s: no such security scheme", name)
	}
	switch strings.ToLower(s.Type) {
	case "apikey":
		if strings.EqualFold(s.In, "header") && strings.EqualFold(s.Name, "X-API-Key") {
			return tenants.AuthKey, ""
		}
		return "", fmt.Sprintf("%s: an API key in %s %q (the edge reads keys from the X-API-Key header)", name, s.In, s.Name)
	case "http":
		if strings.EqualFold(s.Scheme, "bearer") {
			return tenants.AuthJWT, ""
		}
		return "", fmt.Sprintf("%s: HTTP %s authentication", name, s.Scheme)
	case "oauth2", "openidconnect":
		return tenants.AuthJWT, ""
	}
	return "", fmt.Sprintf("%s: a %s scheme", name, s.Type)
}
