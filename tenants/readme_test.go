package tenants_test

import (
	"fmt"
	"strings"
	"testing"
	"tollgate/infra/testenv"

	"tollgate/tenants"
)

// The error-code table (docs/api.md) is the public list of codes: keep it equal to Codes.
func TestREADMEErrorTable(t *testing.T) {
	readme := testenv.DocsText(t)
	for _, c := range tenants.Codes {
		row := fmt.Sprintf("| `%s` | %d | %s | %s |", c.Code, c.Status, c.Where, c.Means)
		if !strings.Contains(readme, row) {
			t.Errorf("the docs lack the row\n%s", row)
		}
	}
}
