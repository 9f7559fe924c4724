// Package apidocs is the management API's reference page: the OpenAPI document rendered
// in the browser by Stoplight Elements, vendored here (with its LICENSE) and embedded, so
// the binary serves it with no CDN and under the console's strict Content-Security-Policy.
//
// The page holds no inline script or style. Try-it is hidden: its code editor writes
// <style> elements, which the policy refuses; the page is a reference, and curl samples
// stay. Font Awesome's runtime stylesheet is turned off for the same reason and served as
// a file instead (see vendor.sh).
package apidocs

import (
	_ "embed"
	"slices"
)

//go:generate sh vendor.sh

// CSP is the console's Content-Security-Policy, which the page is held to.
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Page is the reference's HTML. It loads the assets from /v1/docs/ and the document
// from /v1/openapi.json.
//
//go:embed index.html
var Page []byte

var (
	//go:embed elements/web-components.min.js
	elementsJS []byte
	//go:embed elements/styles.min.css
	elementsCSS []byte
	//go:embed fontawesome/styles.css
	fontawesomeCSS []byte
)

// An Asset is a file the page loads.
type Asset struct {
	Body      []byte
	MediaType string
}

var assets = map[string]Asset{
	"elements.js":     {elementsJS, "text/javascript; charset=utf-8"},
	"elements.css":    {elementsCSS, "text/css; charset=utf-8"},
	"fontawesome.css": {fontawesomeCSS, "text/css; charset=utf-8"},
}

// Lookup is the asset served at /v1/docs/<name>.
func Lookup(name string) (Asset, bool) {
	a, ok := assets[name]
	return a, ok
}

// Names are the assets' names, sorted.
func Names() []string {
	names := make([]string, 0, len(assets))
	for n := range assets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
