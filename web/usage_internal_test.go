package web

import (
	"fmt"
	"testing"
)

// Past usageRowsShown objects, the usage tables keep the busiest and sum the rest in one
// row that says how many it holds; the shares still add up to the whole.
func TestRankedKeepsTheBusiest(t *testing.T) {
	m := map[string]*usageRow{}
	var total int64
	for i := range usageRowsShown + 50 {
		id := fmt.Sprintf("id-%03d", i)
		m[id] = &usageRow{ID: id, Requests: int64(i + 1)}
		total += int64(i + 1)
	}
	rows, more := ranked(m, total, "routes")
	if !more || len(rows) != usageRowsShown+1 {
		t.Fatalf("%d rows, more %v", len(rows), more)
	}
	if rows[0].ID != fmt.Sprintf("id-%03d", usageRowsShown+49) || rows[usageRowsShown-1].ID != "id-050" {
		t.Errorf("kept %s … %s, want the busiest", rows[0].ID, rows[usageRowsShown-1].ID)
	}
	rest := rows[usageRowsShown]
	if rest.ID != "" || rest.Name != "50 other routes" || rest.Requests != 50*51/2 {
		t.Errorf("the rest: %+v", rest)
	}
	var share float64
	for _, r := range rows {
		share += r.Share
	}
	if share < 99.99 || share > 100.01 {
		t.Errorf("shares add up to %.2f%%", share)
	}
	if rows, more := ranked(map[string]*usageRow{"a": {ID: "a", Requests: 1}}, 1, "routes"); more || len(rows) != 1 {
		t.Errorf("one route: %d rows, more %v", len(rows), more)
	}
}
