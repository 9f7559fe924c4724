package web

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/web/forms"
)

// The usage page's latency and error charts: p50/p95/p99 per hour of one route's gateway
// and upstream time (from the merged sketches billing keeps), and each hour's requests by
// status class as shares of the hour, so a rise in 4xx or 5xx shows whatever the volume.

type latencyView struct {
	Enabled bool
	RouteID string
	Routes  []usageRow // the range's busiest routes that have an id, to choose from
	// More: the range had more routes than Routes lists; any other is chosen by its name,
	// RouteName (NameError when it names none).
	More                 bool
	RouteName, NameError string
	Gateway, Upstream    template.HTML
	Total                billing.LatencyRoute // the route over the charted hours
	Hours                string               // the charted hours, in words
}

// latencyCharts fills d.Latency for the route of ?route= (default: the range's busiest):
// hourly lines over the range's last MaxHourlyRange.
func (c *Console) latencyCharts(ctx *fiber.Ctx, tenantID string, d *usageData) error {
	svc, ok := c.cfg.Usage.(billing.LatencyService)
	if !ok {
		return nil
	}
	lv := &d.Latency
	lv.Enabled = true
	for _, r := range d.Routes {
		if r.ID != "" {
			lv.Routes = append(lv.Routes, r)
		}
	}
	lv.RouteID = ctx.Query("route")
	if name := strings.TrimSpace(ctx.Query("route_name")); name != "" {
		// The first route in name order that starts with the name is the one named so,
		// if there is one.
		rs, _, err := c.cfg.Routes.SearchRoutes(c.ctx(ctx), tenantID, name, tenants.Page{Limit: 1})
		if err != nil {
			return err
		}
		lv.RouteName = name
		if len(rs) == 1 && rs[0].Name == name {
			lv.RouteID = rs[0].ID
		} else {
			lv.NameError = "No route is named " + strconv.Quote(name)
		}
	}
	if lv.RouteID == "" && len(lv.Routes) > 0 {
		lv.RouteID = lv.Routes[0].ID
	}
	if lv.RouteID == "" {
		return nil
	}
	from := d.From
	if d.To.Sub(from) > billing.MaxHourlyRange {
		from = d.To.Add(-billing.MaxHourlyRange)
	}
	lv.Hours = from.Format("Jan 2 15h") + " – " + d.To.Add(-time.Hour).Format("Jan 2 15h") + " UTC"
	rep, err := svc.Latency(c.ctx(ctx), billing.LatencyQuery{TenantID: tenantID, RouteID: lv.RouteID, From: from, To: d.To})
	if err != nil {
		return err
	}
	if len(rep.Routes) > 0 {
		lv.Total = rep.Routes[0]
	}
	n := int(d.To.Sub(from) / time.Hour)
	labels := hourLabels(from, n)
	gw, up := latencySeries(n), latencySeries(n)
	for _, it := range rep.Items {
		i := int(it.Hour.Sub(from) / time.Hour)
		if i < 0 || i >= n {
			continue
		}
		gw.set(i, it.Gateway)
		up.set(i, it.Upstream)
	}
	lv.Upstream = latencyLines("Upstream time per hour, ms (p50, p95, p99)", labels, up)
	lv.Gateway = latencyLines("Gateway time per hour, ms (p50, p95, p99)", labels, gw)
	return nil
}

// series are p50, p95 and p99 per hour; NaN where the hour saw no request.
type series [3][]float64

func latencySeries(n int) *series {
	var s series
	for k := range s {
		s[k] = make([]float64, n)
		for i := range s[k] {
			s[k][i] = math.NaN()
		}
	}
	return &s
}

func (s *series) set(i int, st billing.LatencyStats) {
	if st.Count == 0 {
		return
	}
	s[0][i], s[1][i], s[2][i] = st.P50, st.P95, st.P99
}

// hourLabels names n hours from from: the hour ("15h") over two days or less, else the
// day at each midnight ("Jan 2").
func hourLabels(from time.Time, n int) []string {
	out := make([]string, n)
	for i := range out {
		t := from.Add(time.Duration(i) * time.Hour)
		switch {
		case n <= 48:
			out[i] = t.Format("15h")
		case t.Hour() == 0:
			out[i] = t.Format("Jan 2")
		}
	}
	return out
}

// latencyLines draws p50, p95 and p99 as three lines over the hours, gaps where there was no
// traffic, with a y axis in ms and a legend.
func latencyLines(title string, labels []string, s *series) template.HTML {
	const w, h, left, bottom, top = 720, 220, 52, 24, 22
	var max float64
	for _, k := range s {
		for _, v := range k {
			if !math.IsNaN(v) && v > max {
				max = v
			}
		}
	}
	ymax := niceMaxF(max)
	plotH, plotW := float64(h-bottom-top), float64(w-left)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart latency-chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`, w, h, esc(title), esc(title))
	for i := 0; i <= 4; i++ {
		y := float64(top) + plotH*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left, w, y, y, left-6, y+4, fmtMS(ymax-ymax*float64(i)/4))
	}
	n := len(labels)
	slot := plotW / float64(max1(n))
	x := func(i int) float64 { return float64(left) + slot*(float64(i)+0.5) }
	labelAxis(&b, labels, slot, x, h-6)
	names := [3]string{"p50", "p95", "p99"}
	for k := range s {
		var pts []string
		flush := func() {
			if len(pts) == 1 {
				var px, py float64
				fmt.Sscanf(pts[0], "%f,%f", &px, &py)
				fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="3"/>`, names[k], px, py)
			} else if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, names[k], strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, v := range s[k] {
			if math.IsNaN(v) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), float64(top)+plotH-plotH*v/ymax))
		}
		flush()
	}
	for k, name := range names {
		lx := float64(left) + 8 + float64(k)*70
		fmt.Fprintf(&b, `<line class="%s" x1="%.0f" x2="%.0f" y1="10" y2="10"/><text class="axis" x="%.0f" y="14">%s</text>`, name, lx, lx+18, lx+22, name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// labelAxis writes the x labels that fit: every one when the room between two labels
// (hours or days apart) is wide enough for the longest, else every k-th so that none
// overlap.
func labelAxis(b *strings.Builder, labels []string, slot float64, x func(int) float64, y int) {
	longest, gap, last := 0, len(labels), -1
	for i, l := range labels {
		if l == "" {
			continue
		}
		longest = max(longest, len(l))
		if last >= 0 {
			gap = min(gap, i-last)
		}
		last = i
	}
	need := float64(longest)*6.5 + 6 // 11px text: about 6.5px a character
	stride := max(1, int(math.Ceil(need/(slot*float64(gap)))))
	shown := 0
	for i, l := range labels {
		if l == "" {
			continue
		}
		if shown%stride == 0 {
			fmt.Fprintf(b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i), y, esc(l))
		}
		shown++
	}
}

func max1(n int) int { return max(n, 1) }

// niceMaxF rounds v up to 1, 2 or 5 × a power of ten (at least 1 ms).
func niceMaxF(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtMS(v float64) string {
	if v >= 10 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// statusShares draws each bucket's requests by status class as stacked shares of 100%,
// so the error rate reads off the chart whatever the volume.
func statusShares(title string, rep *billing.UsageReport, from, to time.Time, gran string) template.HTML {
	step := time.Hour
	if gran == billing.GranularityDay {
		step = 24 * time.Hour
	}
	base := buckets(&billing.UsageReport{}, from, to, gran)
	n := len(base)
	var counts = make([][6]int64, n)
	for _, it := range rep.Items {
		i := int(it.Start.Sub(from) / step)
		if i < 0 || i >= n {
			continue
		}
		cls := 0
		if len(it.Status) == 3 && it.Status[0] >= '1' && it.Status[0] <= '5' {
			cls = int(it.Status[0] - '0')
		}
		counts[i][cls] += it.Requests
	}
	const w, h, left, bottom, top = 720, 220, 44, 24, 22
	plotH, plotW := float64(h-bottom-top), float64(w-left)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`, w, h, esc(title), esc(title))
	for i := 0; i <= 4; i++ {
		y := float64(top) + plotH*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%d%%</text>`,
			left, w, y, y, left-6, y+4, 100-25*i)
	}
	slot := plotW / float64(max1(n))
	x := func(i int) float64 { return float64(left) + slot*(float64(i)+0.5) }
	labels := make([]string, n)
	tips := make([]string, n)
	for i, bk := range base {
		labels[i], tips[i] = bk.Label, bk.Label
		if bk.Tip != "" {
			tips[i] = bk.Tip
		}
	}
	labelAxis(&b, labels, slot, x, h-6)
	names := [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}
	for i, c := range counts {
		var total int64
		for _, v := range c {
			total += v
		}
		if total == 0 {
			continue
		}
		y := float64(top) + plotH
		// Errors on top, where the eye looks first: 2xx at the bottom, 5xx highest.
		for _, cls := range []int{2, 3, 1, 0, 4, 5} {
			if c[cls] == 0 {
				continue
			}
			bh := plotH * float64(c[cls]) / float64(total)
			y -= bh
			fmt.Fprintf(&b, `<rect class="bar s%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s %s: %s of %s requests (%.1f%%)</title></rect>`,
				cls, x(i)-slot*0.35, y, slot*0.7, bh, esc(tips[i]), names[cls], forms.GroupDigits(c[cls]), forms.GroupDigits(total), 100*float64(c[cls])/float64(total))
		}
	}
	for k, cls := range []int{2, 3, 4, 5} {
		lx := float64(left) + 8 + float64(k)*60
		fmt.Fprintf(&b, `<rect class="bar s%d" x="%.0f" y="4" width="12" height="12" rx="2"/><text class="axis" x="%.0f" y="14">%s</text>`, cls, lx, lx+16, names[cls])
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
