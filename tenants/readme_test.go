package tenants_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"tollgate/tenants"
)

// The README's error-code table is the public list of codes: keep it equal to Codes.
func TestREADMEErrorTable(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, c := range tenants.Codes {
		row := fmt.Sprintf("| `%s` | %d | %s | %s |", c.Code, c.Status, c.Where, c.Means)
		if !strings.Contains(readme, row) {
			t.Errorf("README lacks the row\n%s", row)
		}
	}
}
