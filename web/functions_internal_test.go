package web

import (
	"reflect"
	"strings"
	"testing"

	"tollgate/tenants"
)

func TestFunctionLines(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	fs := []tenants.FunctionRef{{Name: "sign", SHA256: sha, Config: `{"k": "v w"}`}, {Name: "plain"}, {Name: "cfg", Config: "x"}}
	text := functionLines(fs)
	if want := "sign@" + sha + ` {"k": "v w"}` + "\nplain\ncfg x"; text != want {
		t.Fatalf("functionLines = %q, want %q", text, want)
	}
	if got := readFunctions("  \n" + text + "\n\n"); !reflect.DeepEqual(got, fs) {
		t.Fatalf("readFunctions = %+v", got)
	}
}

// FuzzReadFunctions: whatever a browser posts in the route form's functions field reads
// into refs that show as lines reading back to the same refs. A lone "@" reads as a ref
// with no name, which the route's validation refuses at its line; it shows as nothing.
func FuzzReadFunctions(f *testing.F) {
	f.Add("sign@" + strings.Repeat("0", 64) + ` {"a": 1}` + "\nplain")
	f.Add("@\n @ x\n\tname  config with  spaces ")
	f.Add("a@b@c d\r\ne")
	f.Fuzz(func(t *testing.T, text string) {
		var refs []tenants.FunctionRef
		for _, r := range readFunctions(text) {
			if r != (tenants.FunctionRef{}) {
				refs = append(refs, r)
			}
		}
		again := readFunctions(functionLines(refs))
		if len(refs) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(again, refs) {
			t.Fatalf("%q: read %+v, shown and read again %+v", text, refs, again)
		}
	})
}
