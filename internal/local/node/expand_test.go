package node

import "testing"

// The cases follow the kubelet's expansion tests (third_party/forked/golang/expansion).
func TestExpand(t *testing.T) {
	vars := map[string]string{"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	cases := []struct{ in, want string }{
		{in: "", want: ""},
		{in: "plain", want: "plain"},
		{in: "$(VAR_A)", want: "A"},
		{in: "___$(VAR_B)___", want: "___B___"},
		{in: "$(VAR_A)-$(VAR_B)-$(VAR_C)", want: "A-B-C"},
		{in: "$(VAR_REF)", want: "$(VAR_A)"}, // values are not expanded again
		{in: "$(VAR_EMPTY)", want: ""},
		{in: "$(UNDEFINED)", want: "$(UNDEFINED)"},
		{in: "$$(VAR_A)", want: "$(VAR_A)"},
		{in: "$$$(VAR_A)", want: "$A"},
		{in: "$$$$(VAR_A)", want: "$$(VAR_A)"},
		{in: "$(VAR_A", want: "$(VAR_A"},
		{in: "$(", want: "$("},
		{in: "$", want: "$"},
		{in: "VAR_A$", want: "VAR_A$"},
		{in: "$VAR_A", want: "$VAR_A"},
		{in: "${VAR_A}", want: "${VAR_A}"},
		{in: "$()", want: "$()"},
		{in: "$(VAR_A)$(VAR_A)", want: "AA"},
		{in: "f000-$$VAR_A", want: "f000-$VAR_A"},
		{in: "$(VAR_A)$$(VAR_B)$(UNDEF)$", want: "A$(VAR_B)$(UNDEF)$"},
	}
	for _, c := range cases {
		if got := Expand(c.in, lookup); got != c.want {
			t.Errorf("Expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
