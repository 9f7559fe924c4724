package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
)

// walkPages reads the page's rows (css: their first cells), then follows "Next page" by
// clicking it until there is none, and returns each page's rows. It checks that every page
// after the first links back to the first.
func (b *browser) walkPages(css string) [][]string {
	b.t.Helper()
	var pages [][]string
	for i := 0; ; i++ {
		if i > 10 {
			b.t.Fatal("the pages do not end")
		}
		rows := b.eval(`Array.from(document.querySelectorAll(` + jsString(css) + `)).map(e => e.textContent.trim()).join("\n")`)
		pages = append(pages, strings.Fields(rows))
		if i > 0 && b.count(`nav.pager a[rel=first]`) != 1 {
			b.t.Errorf("page %d has no link to the first page", i+1)
		}
		next := b.eval(`(document.querySelector("nav.pager a[rel=next]") || {}).getAttribute?.("href") || ""`)
		if next == "" {
			return pages
		}
		b.do(chromedp.Click(chromedp.CSS(`nav.pager a[rel=next]`)))
		b.waitPath(next)
	}
}

func sizes(pages [][]string) []int {
	out := make([]int, len(pages))
	for i, p := range pages {
		out[i] = len(p)
	}
	return out
}

// TestConsolePagingBrowser: a tenant with 250 routes and 250 consumers reaches every one
// of them a page of 100 at a time, and the audit log of those 250 writes likewise; the
// routes page filters by name prefix, and the filter's pages keep it.
func TestConsolePagingBrowser(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	slug := "paged-" + testenv.Name("")[:6]
	owner := newBrowser(t, s.api)
	owner.signUp("owner-"+slug+"@example.com", slug)
	base := "/console/t/" + slug

	// The free plan holds 10 routes; the names sort as they were made: r000 … r249.
	version := s.admin(t, "GET", "/v1/tenants/"+slug)["version"]
	s.adminSend(t, "PATCH", "/v1/tenants/"+slug, fmt.Sprintf(`{"plan":"unlimited","version":%v}`, version))
	var routes []string
	for i := range 250 {
		routes = append(routes, fmt.Sprintf(`{"name":"r%03d","paths":["/r%03d"],"auth":"none","upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}`, i, i))
	}
	s.adminPut(t, "/v1/tenants/"+slug+"/config", `{"version":1,"tenant":"`+slug+`","routes":[`+strings.Join(routes, ",")+`]}`)
	for i := range 250 {
		s.adminSend(t, "POST", "/v1/tenants/"+slug+"/consumers", fmt.Sprintf(`{"name":"c%03d"}`, i))
	}

	check := func(what string, pages [][]string, want []int, prefix string) {
		t.Helper()
		if fmt.Sprint(sizes(pages)) != fmt.Sprint(want) {
			t.Errorf("%s: pages of %v, want %v", what, sizes(pages), want)
		}
		seen := map[string]bool{}
		for _, p := range pages {
			for _, name := range p {
				if seen[name] || !strings.HasPrefix(name, prefix) {
					t.Errorf("%s: %q shown twice or not asked for", what, name)
				}
				seen[name] = true
			}
		}
	}

	owner.open(base + "/routes")
	routePages := owner.walkPages(`table.routes tbody tr td:first-child`)
	check("routes", routePages, []int{100, 100, 50}, "r")
	owner.screenshot("routes-last-page")
	owner.do(chromedp.Click(chromedp.CSS(`nav.pager a[rel=first]`)))
	owner.waitPath(base + "/routes")
	if first := owner.eval(`document.querySelector("table.routes tbody td").textContent.trim()`); first != routePages[0][0] {
		t.Errorf("the first page link shows %q first, want %q", first, routePages[0][0])
	}

	// r1 matches exactly one page: no next page. r2 matches 50, r24 10, in name order.
	for _, tc := range []struct {
		prefix string
		want   []int
	}{{"r1", []int{100}}, {"r24", []int{10}}, {"zz", []int{0}}} {
		owner.open(base + "/routes")
		owner.fill(map[string]string{"#q": tc.prefix})
		owner.do(chromedp.Click(chromedp.CSS(`form.route-filter button[type=submit]`)))
		owner.waitPath(base + "/routes?q=" + tc.prefix)
		pages := owner.walkPages(`table.routes tbody tr td:first-child`)
		check("routes starting with "+tc.prefix, pages, tc.want, tc.prefix)
		if tc.prefix == "r24" && strings.Join(pages[0], " ") != "r240 r241 r242 r243 r244 r245 r246 r247 r248 r249" {
			t.Errorf("r24 shows %v, not in name order", pages[0])
		}
	}
	owner.contains("No route's name starts with zz")
	// A filter of more than a page keeps the filter on its next page.
	owner.open(base + "/routes?q=r")
	check("routes starting with r", owner.walkPages(`table.routes tbody tr td:first-child`), []int{100, 100, 50}, "r")

	owner.open(base + "/consumers")
	check("consumers", owner.walkPages(`table tbody tr td:first-child`), []int{100, 100, 50}, "c")

	// 250 consumers.create entries, a config.apply, a tenants.update and the sign-up's own.
	owner.open(base + "/audit")
	audit := owner.walkPages(`table tbody tr td:nth-child(3)`)
	if n := sizes(audit); len(n) != 3 || n[0] != 100 || n[1] != 100 || n[2] < 52 {
		t.Errorf("audit pages of %v, want 100, 100 and the rest", n)
	}
}
