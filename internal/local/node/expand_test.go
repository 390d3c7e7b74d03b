package node

import "testing"

// The cases follow the kubelet's expansion tests (third_party/forked/golang/expansion).
func TestExpand(t *testing.T) {
	vars := map[string]string{"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	cases := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"$(VAR_A)", "A"},
		{"___$(VAR_B)___", "___B___"},
		{"$(VAR_A)-$(VAR_B)-$(VAR_C)", "A-B-C"},
		{"$(VAR_REF)", "$(VAR_A)"}, // values are not expanded again
		{"$(VAR_EMPTY)", ""},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(VAR_A)", "$(VAR_A)"},
		{"$$$(VAR_A)", "$A"},
		{"$$$$(VAR_A)", "$$(VAR_A)"},
		{"$(VAR_A", "$(VAR_A"},
		{"$(", "$("},
		{"$", "$"},
		{"VAR_A$", "VAR_A$"},
		{"$VAR_A", "$VAR_A"},
		{"${VAR_A}", "${VAR_A}"},
		{"$()", "$()"},
		{"$(VAR_A)$(VAR_A)", "AA"},
		{"f000-$$VAR_A", "f000-$VAR_A"},
		{"$(VAR_A)$$(VAR_B)$(UNDEF)$", "A$(VAR_B)$(UNDEF)$"},
	}
	for _, c := range cases {
		if got := Expand(c.in, lookup); got != c.want {
			t.Errorf("Expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
