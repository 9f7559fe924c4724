package web

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
)

// The usage page draws the billing rollups as inline SVG: requests per hour over the last
// 24 hours, by route and by status class, and the month's requests against the plan's
// quota. The pictures are computed here, on the server, so the page needs no script and
// nothing from another origin.

type bar struct {
	Label string
	Value int64
	Class string // CSS class: the status class of a status bar
}

type usageData struct {
	Enabled           bool
	Total             int64
	Billable          int64
	Month             int64
	Quota             int64 // 0: no quota
	QuotaPct          float64
	OverTime          template.HTML
	ByRoute, ByStatus template.HTML
	From, To          time.Time
}

func (c *Console) usagePage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	d := usageData{Enabled: c.cfg.Usage != nil}
	if !d.Enabled {
		return c.render(ctx, http.StatusOK, "usage", page{Title: "Usage", Nav: "usage", Data: d})
	}
	now := c.cfg.Now().UTC()
	to := billing.Hour(now).Add(time.Hour)
	from := to.Add(-24 * time.Hour)
	d.From, d.To = from, to
	rep, err := c.cfg.Usage.Usage(c.ctx(ctx), billing.UsageQuery{TenantID: tv.ID, From: from, To: to, Granularity: billing.GranularityHour, ByRoute: true, ByStatus: true})
	if err != nil {
		return c.internal(ctx, err)
	}
	month, err := c.cfg.Usage.Usage(c.ctx(ctx), billing.UsageQuery{TenantID: tv.ID, From: billing.PeriodOf(now).Start(), To: to, Granularity: billing.GranularityDay})
	if err != nil {
		return c.internal(ctx, err)
	}
	d.Total, d.Billable, d.Month = rep.Total.Requests, rep.Total.Billable, month.Total.Requests
	if tv.Limits != nil && tv.Limits.Quota != nil && tv.Limits.Quota.Requests > 0 {
		d.Quota = tv.Limits.Quota.Requests
		d.QuotaPct = math.Min(100, 100*float64(d.Month)/float64(d.Quota))
	}
	names := map[string]string{}
	if routes, _, err := c.cfg.Routes.ListRoutes(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit}); err == nil {
		for _, r := range routes {
			names[r.ID] = r.Name
		}
	}
	hours := make([]bar, 24)
	for i := range hours {
		hours[i].Label = from.Add(time.Duration(i) * time.Hour).Format("15h")
	}
	byRoute, byStatus := map[string]int64{}, map[string]int64{}
	for _, it := range rep.Items {
		if i := int(it.Start.Sub(from) / time.Hour); i >= 0 && i < len(hours) {
			hours[i].Value += it.Requests
		}
		route := "(no route matched)"
		if it.RouteID != nil && *it.RouteID != "" {
			route = names[*it.RouteID]
			if route == "" {
				route = "(deleted route)"
			}
		}
		byRoute[route] += it.Requests
		byStatus[it.Status] += it.Requests
	}
	d.OverTime = columns("Requests per hour, last 24 hours (UTC)", hours)
	d.ByRoute = rows("Requests by route", sorted(byRoute, ""))
	d.ByStatus = rows("Requests by status", sorted(byStatus, "status"))
	return c.render(ctx, http.StatusOK, "usage", page{Title: "Usage", Nav: "usage", Data: d})
}

func sorted(m map[string]int64, class string) []bar {
	out := make([]bar, 0, len(m))
	for k, v := range m {
		b := bar{Label: k, Value: v}
		if class != "" {
			b.Class = "s" + strings.TrimSuffix(k, "xx")
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if class != "" {
			return out[i].Label < out[j].Label
		}
		return out[i].Value > out[j].Value || out[i].Value == out[j].Value && out[i].Label < out[j].Label
	})
	return out
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// niceMax rounds v up to 1, 2 or 5 × a power of ten, for the axis.
func niceMax(v int64) int64 {
	if v <= 0 {
		return 1
	}
	p := int64(1)
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// columns draws a vertical bar chart of bars in order, with a y axis and every third label.
func columns(title string, bars []bar) template.HTML {
	const w, h, left, bottom, top = 720, 220, 44, 24, 10
	var max int64
	for _, b := range bars {
		if b.Value > max {
			max = b.Value
		}
	}
	ymax := niceMax(max)
	if ymax < 4 {
		ymax = 4
	}
	steps := int64(4) // gridlines at whole numbers: 5 steps for 5, 10, 50…; 4 for 4, 20, 200…
	if ymax%5 == 0 {
		steps = 5
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" preserveAspectRatio="xMidYMid meet"><title>%s</title>`, w, h, esc(title), esc(title))
	plotH := float64(h - bottom - top)
	for i := int64(0); i <= steps; i++ {
		y := float64(top) + plotH*float64(i)/float64(steps)
		v := ymax - ymax*i/steps
		fmt.Fprintf(&s, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left, w, y, y, left-6, y+4, groupDigits(v))
	}
	n := len(bars)
	slot := float64(w-left) / float64(n)
	for i, b := range bars {
		bh := plotH * float64(b.Value) / float64(ymax)
		x := float64(left) + slot*float64(i) + slot*0.15
		fmt.Fprintf(&s, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s requests</title></rect>`,
			x, float64(top)+plotH-bh, slot*0.7, math.Max(bh, 0), esc(b.Label), groupDigits(b.Value))
		if i%3 == 0 {
			fmt.Fprintf(&s, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x+slot*0.35, h-6, esc(b.Label))
		}
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}

// rows draws a horizontal bar chart, one labelled row per bar.
func rows(title string, bars []bar) template.HTML {
	if len(bars) == 0 {
		return ""
	}
	if len(bars) > 12 {
		bars = bars[:12]
	}
	const w, rowH, label = 480, 30, 150
	h := rowH*len(bars) + 8
	var max int64
	for _, b := range bars {
		if b.Value > max {
			max = b.Value
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`, w, h, esc(title), esc(title))
	for i, b := range bars {
		y := 4 + i*rowH
		bw := float64(w-label-60) * float64(b.Value) / float64(max)
		cls := "bar"
		if b.Class != "" {
			cls += " " + b.Class
		}
		name := b.Label
		if len(name) > 20 {
			name = name[:19] + "…"
		}
		fmt.Fprintf(&s, `<text class="label" x="%d" y="%d" text-anchor="end">%s</text>`, label-10, y+19, esc(name))
		fmt.Fprintf(&s, `<rect class="%s" x="%d" y="%d" width="%.1f" height="%d" rx="3"><title>%s: %s requests</title></rect>`,
			cls, label, y+4, math.Max(bw, 2), rowH-10, esc(b.Label), groupDigits(b.Value))
		fmt.Fprintf(&s, `<text class="value" x="%.1f" y="%d">%s</text>`, float64(label)+math.Max(bw, 2)+8, y+19, groupDigits(b.Value))
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}
