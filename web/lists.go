package web

import (
	"net/url"

	"github.com/gofiber/fiber/v2"
)

// The long lists (routes, consumers, the audit log) show one page of Config.PageSize at a
// time, walked with the store's keyset cursors: a tenant with 50,000 routes reaches every
// one, and no page costs more than the first. Each page links to the next (the cursor of
// its last item) and back to the first; "back one page" is the browser's, since a keyset
// cursor only walks forward.

// listView is one page of a list.
type listView struct {
	Items any
	// Query is the routes page's name filter, as typed.
	Query string
	// Next and First link to the next and the first page; "" when there is none to go to.
	Next, First string
}

// pageLinks makes the links of a page at path: the next page's with the cursor next ("":
// this is the last), the first page's when this one is not it. keep holds the filters
// both carry.
func pageLinks(ctx *fiber.Ctx, path, next string, keep url.Values) (nextURL, firstURL string) {
	with := func(cursor string) string {
		v := url.Values{}
		for k, vs := range keep {
			v[k] = vs
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		if q := v.Encode(); q != "" {
			return path + "?" + q
		}
		return path
	}
	if next != "" {
		nextURL = with(next)
	}
	if ctx.Query("cursor") != "" {
		firstURL = with("")
	}
	return nextURL, firstURL
}
