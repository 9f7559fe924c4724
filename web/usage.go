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
	"tollgate/infra/usage"
	"tollgate/web/forms"
)

// The usage page draws the billing rollups as inline SVG: requests per hour over the last
// 24 hours, by route and by status class, and the month's requests against the plan's
// quota. The pictures are computed here, on the server, so the page needs no script and
// nothing from another origin.

type bar struct {
	Label string
	Tip   string // the bar's full name when Label is short; "" when Label is it
	Value int64
	Class string // CSS class: the status class of a status bar
}

type usageData struct {
	Enabled           bool
	Total             int64
	Billable          int64
	FunctionUS        int64 // the range's function time
	Month             int64
	Quota             int64 // 0: no quota
	QuotaPct          float64
	OverTime          template.HTML
	ByRoute, ByStatus template.HTML
	From, To          time.Time // [From, To): the range asked for, on whole hours
	Range             usageRange
	Routes, Consumers []usageRow // the range's calls by route and by consumer, most first
	StatusShare       template.HTML
	Latency           latencyView // latency.go
}

// usageRange is the date range of the form: whole UTC days, both included.
type usageRange struct {
	From, To string // YYYY-MM-DD
	Errors   map[string]string
}

// usageRow is one route's or consumer's calls over the range; Link "" when the object is
// gone or there is none (calls without a consumer, or that matched no route).
type usageRow struct {
	Name, Link         string
	ID                 string // "" when there is none
	Requests, Billable int64
	FunctionUS         int64
	Share              float64 // of the range's requests, in percent
}

// maxUsageDays bounds a range: a year of daily rollups is what one page should draw.
const maxUsageDays = 366

// readRange reads ?from=&to= (default: this month so far); a bad one gets its message and
// the default.
func readRange(ctx *fiber.Ctx, now time.Time) (usageRange, time.Time, time.Time) {
	today := now.UTC().Truncate(24 * time.Hour)
	first := billing.PeriodOf(now).Start()
	r := usageRange{From: ctx.Query("from", first.Format(time.DateOnly)), To: ctx.Query("to", today.Format(time.DateOnly)), Errors: map[string]string{}}
	from, err := time.Parse(time.DateOnly, r.From)
	if err != nil {
		r.Errors["from"] = "Give the first day as YYYY-MM-DD"
	}
	to, err := time.Parse(time.DateOnly, r.To)
	if err != nil {
		r.Errors["to"] = "Give the last day as YYYY-MM-DD"
	}
	switch {
	case len(r.Errors) > 0:
	case to.Before(from):
		r.Errors["to"] = "The last day must not be before the first"
	case to.Sub(from) >= maxUsageDays*24*time.Hour:
		r.Errors["to"] = "Ask for at most " + itoa(maxUsageDays) + " days at once"
	case from.After(today):
		r.Errors["from"] = "The first day is in the future: there is no usage yet"
	}
	if len(r.Errors) > 0 {
		from, to = first, today
	}
	end := to.Add(24 * time.Hour)
	if limit := billing.Hour(now).Add(time.Hour); end.After(limit) {
		end = limit // the rollups end at the current hour
	}
	return r, from, end
}

func (c *Console) usagePage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	d := usageData{Enabled: c.cfg.Usage != nil}
	if !d.Enabled {
		return c.render(ctx, http.StatusOK, "usage", page{Title: "Usage", Nav: "usage", Data: d})
	}
	now := c.cfg.Now().UTC()
	d.Range, d.From, d.To = readRange(ctx, now)
	gran := billing.GranularityDay
	if d.To.Sub(d.From) <= 48*time.Hour {
		gran = billing.GranularityHour
	}
	rep, err := c.cfg.Usage.Usage(c.ctx(ctx), billing.UsageQuery{TenantID: tv.ID, From: d.From, To: d.To, Granularity: gran, ByStatus: true})
	if err != nil {
		return c.internal(ctx, err)
	}
	who, err := c.cfg.Usage.Usage(c.ctx(ctx), billing.UsageQuery{TenantID: tv.ID, From: d.From, To: d.To, Granularity: billing.GranularityDay, ByRoute: true, ByConsumer: true})
	if err != nil {
		return c.internal(ctx, err)
	}
	month, err := c.cfg.Usage.Usage(c.ctx(ctx), billing.UsageQuery{TenantID: tv.ID, From: billing.PeriodOf(now).Start(), To: billing.Hour(now).Add(time.Hour), Granularity: billing.GranularityDay})
	if err != nil {
		return c.internal(ctx, err)
	}
	// The quota counts what is billable: the gateway's own refusals use none of it.
	d.Total, d.Billable, d.Month = rep.Total.Requests, rep.Total.Billable, month.Total.Billable
	d.FunctionUS = rep.Total.FunctionUS
	if tv.Limits != nil && tv.Limits.Quota != nil && tv.Limits.Quota.Requests > 0 {
		d.Quota = tv.Limits.Quota.Requests
		d.QuotaPct = math.Min(100, 100*float64(d.Month)/float64(d.Quota))
	}
	d.OverTime = columns(overTimeTitle(gran), buckets(rep, d.From, d.To, gran))
	byStatus := map[string]int64{}
	for _, it := range rep.Items {
		byStatus[it.Status] += it.Requests
	}
	d.ByStatus = rows("Requests by status", sorted(byStatus, "status"))
	if d.Routes, d.Consumers, d.Latency.More, err = c.usageRows(ctx, who); err != nil {
		return c.internal(ctx, err)
	}
	byRoute := map[string]int64{}
	for _, r := range d.Routes {
		byRoute[r.Name] += r.Requests
	}
	d.ByRoute = rows("Requests by route", sorted(byRoute, ""))
	d.StatusShare = statusShares(strings.Replace(overTimeTitle(gran), "Requests", "Requests by status class", 1)+", share", rep, d.From, d.To, gran)
	if err := c.latencyCharts(ctx, tv.ID, &d); err != nil {
		return c.internal(ctx, err)
	}
	status := http.StatusOK
	if len(d.Range.Errors) > 0 {
		status = http.StatusUnprocessableEntity
	}
	return c.render(ctx, status, "usage", page{Title: "Usage", Nav: "usage", Data: d})
}

func overTimeTitle(gran string) string {
	if gran == billing.GranularityHour {
		return "Requests per hour (UTC)"
	}
	return "Requests per day (UTC)"
}

// buckets lays the report's items on every hour or day of [from, to), empty ones included.
func buckets(rep *billing.UsageReport, from, to time.Time, gran string) []bar {
	step, format := time.Hour, "15h"
	if gran == billing.GranularityDay {
		step, format = 24*time.Hour, "Jan 2"
	}
	short := gran == billing.GranularityDay && to.Sub(from) > 17*24*time.Hour
	var out []bar
	for t := from; t.Before(to); t = t.Add(step) {
		b := bar{Label: t.Format(format)}
		if short {
			// A month of "Jan 2" labels does not fit under its bars; day numbers do, so
			// every day keeps a label.
			b.Label, b.Tip = t.Format("2"), b.Label
		}
		out = append(out, b)
	}
	for _, it := range rep.Items {
		if i := int(it.Start.Sub(from) / step); i >= 0 && i < len(out) {
			out[i].Value += it.Requests
		}
	}
	return out
}

// usageRowsShown bounds the by-route and by-consumer tables: a tenant of 50,000 routes
// gets its busiest named and linked, and the rest in one row.
const usageRowsShown = 100

// usageRows sums the report by route and by consumer, the busiest usageRowsShown of each
// named and linked to their pages (the names looked up by id), the others summed in one
// row; more reports whether routes were left out that way.
func (c *Console) usageRows(ctx *fiber.Ctx, rep *billing.UsageReport) (routes, consumers []usageRow, more bool, err error) {
	tv := tenantOf(ctx)
	base := c.tenantURL(ctx, "")
	byRoute, byConsumer := map[string]*usageRow{}, map[string]*usageRow{}
	for _, it := range rep.Items {
		add(byRoute, deref(it.RouteID), it.Counts)
		add(byConsumer, deref(it.ConsumerID), it.Counts)
	}
	routes, more = ranked(byRoute, rep.Total.Requests, "routes")
	consumers, _ = ranked(byConsumer, rep.Total.Requests, "consumers")
	routeNames, err := c.cfg.Routes.RouteNames(c.ctx(ctx), tv.ID, ids(routes))
	if err != nil {
		return nil, nil, false, err
	}
	consumerNames, err := c.cfg.Consumers.ConsumerNames(c.ctx(ctx), tv.ID, ids(consumers))
	if err != nil {
		return nil, nil, false, err
	}
	name(routes, routeNames, base+"/routes/", "(no route matched)", "(deleted route)")
	name(consumers, consumerNames, base+"/consumers/", "(no consumer: calls without a key or token)", "(deleted consumer)")
	return routes, consumers, more, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func add(into map[string]*usageRow, id string, n usage.Counts) {
	r := into[id]
	if r == nil {
		r = &usageRow{ID: id}
		into[id] = r
	}
	r.Requests += n.Requests
	r.Billable += n.Billable
	r.FunctionUS += n.FunctionUS
}

// ids are the rows' object ids, for a name lookup.
func ids(rows []usageRow) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if r.ID != "" {
			out = append(out, r.ID)
		}
	}
	return out
}

// name sets the rows' names and links: the object's, none for the row of no object, gone
// for an object that no longer exists. The row of the others keeps its name.
func name(rows []usageRow, names map[string]string, link, none, gone string) {
	for i := range rows {
		r := &rows[i]
		switch n, ok := names[r.ID]; {
		case r.Name != "":
		case r.ID == "":
			r.Name = none
		case !ok:
			r.Name = gone
		default:
			r.Name, r.Link = n, link+r.ID
		}
	}
}

// functionMS shows function time, metered in microseconds, in the milliseconds it is
// priced in: "2,012.345".
func functionMS(us int64) string {
	if us < 0 {
		return "-" + functionMS(-us)
	}
	return forms.GroupDigits(us/1000) + fmt.Sprintf(".%03d", us%1000)
}

// ranked orders the rows by requests, most first (ties by id), each with its share of
// total; past usageRowsShown the rest are summed in one row named for how many objects
// (noun) it holds, and more is true.
func ranked(m map[string]*usageRow, total int64, noun string) (out []usageRow, more bool) {
	out = make([]usageRow, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Requests > out[j].Requests || out[i].Requests == out[j].Requests && out[i].ID < out[j].ID
	})
	if len(out) > usageRowsShown {
		rest := usageRow{Name: forms.GroupDigits(int64(len(out)-usageRowsShown)) + " other " + noun}
		for _, r := range out[usageRowsShown:] {
			rest.Requests += r.Requests
			rest.Billable += r.Billable
			rest.FunctionUS += r.FunctionUS
		}
		out, more = append(out[:usageRowsShown], rest), true
	}
	for i := range out {
		if total > 0 {
			out[i].Share = 100 * float64(out[i].Requests) / float64(total)
		}
	}
	return out, more
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

// columns draws a vertical bar chart of bars in order, with a y axis and every label
// that fits (see labelAxis).
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
			left, w, y, y, left-6, y+4, forms.GroupDigits(v))
	}
	n := len(bars)
	slot := float64(w-left) / float64(n)
	for i, b := range bars {
		bh := plotH * float64(b.Value) / float64(ymax)
		x := float64(left) + slot*float64(i) + slot*0.15
		tip := b.Label
		if b.Tip != "" {
			tip = b.Tip
		}
		fmt.Fprintf(&s, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s requests</title></rect>`,
			x, float64(top)+plotH-bh, slot*0.7, math.Max(bh, 0), esc(tip), forms.GroupDigits(b.Value))
	}
	labels := make([]string, n)
	for i, b := range bars {
		labels[i] = b.Label
	}
	labelAxis(&s, labels, slot, func(i int) float64 { return float64(left) + slot*(float64(i)+0.5) }, h-6)
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
			cls, label, y+4, math.Max(bw, 2), rowH-10, esc(b.Label), forms.GroupDigits(b.Value))
		fmt.Fprintf(&s, `<text class="value" x="%.1f" y="%d">%s</text>`, float64(label)+math.Max(bw, 2)+8, y+19, forms.GroupDigits(b.Value))
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}
