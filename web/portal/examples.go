package portal

import (
	"bytes"
	"encoding/json"
	neturl "net/url"
	"strings"
	"unicode"

	"tollgate/tenants"
	"tollgate/web/shellword"
)

// Examples call what the edge serves: an operation a route of the tenant answers, its
// path parameters filled with the document's examples or a placeholder in capitals
// (ORDER_ID), its required query and header parameters given, its body built from the
// schema, and the credential header the route's authentication reads. A tenant whose
// routes serve nothing gets no curl line, and the page says so.

// example is one call of a served operation.
type example struct {
	Op          *operation
	Method, URL string
	Headers     []string // "Name: value"
	Credential  string   // "X-API-Key: " or "Authorization: Bearer "; "" when the route reads none
	Placeholder string   // what stands for the credential: YOUR_KEY, YOUR_TOKEN
	Media, Body string
}

// chooseExample picks the simplest served operation: a GET before other methods, then
// the fewest path parameters without an example and required parameters to fill. nil
// when no operation is served.
func chooseExample(ops []*operation, edgeURL string) *example {
	var best *operation
	bestScore := 0
	for _, o := range ops {
		if o.Route == nil {
			continue
		}
		if s := exampleScore(o); best == nil || s < bestScore {
			best, bestScore = o, s
		}
	}
	if best == nil {
		return nil
	}
	return newExample(best, edgeURL)
}

func exampleScore(o *operation) int {
	s := 0
	if o.Method != "GET" {
		s += 100
	}
	if h, _ := credential(o.Route.Auth, ""); h == "" && o.Route.Auth != tenants.AuthNone && o.Route.Auth != "" {
		s += 50 // a function or the tenant's authorizer decides: the example cannot say what to send
	}
	for _, p := range o.Params {
		switch {
		case p.In == "path" && p.Example == "":
			s += 10
		case p.Required:
			s++
		}
	}
	return s
}

// credential is the header a route's authentication reads and what stands for the
// credential in examples. A key_or_jwt route gets a JWT (three dot-separated parts) as a
// bearer token and anything else as a key.
func credential(auth, value string) (header, placeholder string) {
	switch auth {
	case tenants.AuthKey:
		return "X-API-Key: ", "YOUR_KEY"
	case tenants.AuthKeyOrJWT:
		if strings.Count(value, ".") == 2 {
			return "Authorization: Bearer ", "YOUR_TOKEN"
		}
		return "X-API-Key: ", "YOUR_KEY"
	case tenants.AuthJWT:
		return "Authorization: Bearer ", "YOUR_TOKEN"
	}
	return "", ""
}

func newExample(o *operation, edgeURL string) *example {
	e := &example{Op: o, Method: o.Method}
	q := neturl.Values{}
	for _, p := range o.Params {
		if !p.Required {
			continue
		}
		switch p.In {
		case "query":
			q.Add(p.Name, valueOrPlaceholder(p))
		case "header":
			e.Headers = append(e.Headers, p.Name+": "+valueOrPlaceholder(p))
		}
	}
	e.URL = edgeURL + fillPath(o.Path, o.Params, nil)
	if len(q) > 0 {
		e.URL += "?" + q.Encode()
	}
	e.Credential, e.Placeholder = credential(o.Route.Auth, "")
	if bodyMethod(o.Method) {
		e.Media, e.Body = o.BodyMedia, compactJSON(o.BodyExample)
		if e.Media == "" {
			e.Media, e.Body = "application/json", "{}"
		}
	}
	return e
}

// curl writes the example as one line for a shell, every value quoted as one word; key
// replaces the placeholder when given.
func (e *example) curl(key string) string {
	var b strings.Builder
	b.WriteString("curl -i")
	if strings.ContainsAny(e.URL, "[]{}") {
		b.WriteString(" -g") // curl would read them as a URL pattern
	}
	if e.Method != "GET" {
		b.WriteString(" -X " + shellword.Quote(e.Method))
	}
	for _, h := range e.Headers {
		b.WriteString(" -H " + shellword.Quote(h))
	}
	if e.Credential != "" {
		if key == "" || e.Placeholder != "YOUR_KEY" {
			key = e.Placeholder // a key is no bearer token
		}
		b.WriteString(" -H " + shellword.Quote(e.Credential, key))
	}
	if e.Media != "" {
		b.WriteString(" -H " + shellword.Quote("Content-Type: "+e.Media) + " -d " + shellword.Quote(e.Body))
	}
	b.WriteString(" " + shellword.Quote(e.URL))
	return b.String()
}

// fillPath puts values in the {name} parameters of path: values[name] when given, else
// the parameter's example, else its placeholder; each escaped as one path segment.
func fillPath(path string, params []param, values map[string]string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(path, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(path[open:], '}')
		if end < 0 {
			break
		}
		name := path[open+1 : open+end]
		b.WriteString(path[:open])
		v := values[name]
		if v == "" {
			v = placeholder(name)
			for _, p := range params {
				if p.In == "path" && p.Name == name && p.Example != "" {
					v = p.Example
				}
			}
		}
		b.WriteString(neturl.PathEscape(v))
		path = path[open+end+1:]
	}
	b.WriteString(path)
	return b.String()
}

func valueOrPlaceholder(p param) string {
	if p.Example != "" {
		return p.Example
	}
	return placeholder(p.Name)
}

// placeholder writes a parameter's name in capitals, words split by "_": orderId and
// order-id are ORDER_ID, plainly something to replace.
func placeholder(name string) string {
	var b strings.Builder
	prevLower := false
	for _, r := range name {
		switch {
		case unicode.IsUpper(r):
			if prevLower {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			prevLower = false
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(unicode.ToUpper(r))
			prevLower = true
		default:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
				b.WriteByte('_')
			}
			prevLower = false
		}
	}
	if b.Len() == 0 {
		return "VALUE"
	}
	return strings.TrimSuffix(b.String(), "_")
}

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
