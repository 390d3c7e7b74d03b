package node

import "strings"

// Expand replaces $(NAME) references in s the way the kubelet expands container env values, command and
// args: $(NAME) becomes lookup(NAME) when NAME is defined, and stays as written when it is not; $$ is an
// escaped $; a $ before anything else is kept.
func Expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += end + 2
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
