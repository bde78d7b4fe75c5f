package stepbuild

import (
	"fmt"
	"strings"
)

// expand substitutes variables as Docker's builder does in ENV, ARG,
// LABEL, WORKDIR, USER, COPY and ADD: $NAME, ${NAME}, ${NAME:-word} (word
// when NAME is unset or empty), ${NAME:+word} (word when it is set and not
// empty); \$ is a dollar. An unset variable is empty.
func expand(s string, vars map[string]string) (string, error) {
	if !strings.ContainsAny(s, `$\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		if s[i+1] == '{' {
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("%s: a ${ with no }", clip(s))
			}
			body := s[i+2 : i+2+end]
			i += 2 + end
			name, word, op := body, "", ""
			if j := strings.Index(body, ":"); j >= 0 {
				name, op = body[:j], body[j:]
				if len(op) < 2 || (op[1] != '-' && op[1] != '+') {
					return "", fmt.Errorf("%s: ${%s}: only :- and :+ are taken", clip(s), body)
				}
				word, op = op[2:], op[:2]
			}
			if !isName(name) {
				return "", fmt.Errorf("%s: ${%s} is not a variable", clip(s), body)
			}
			v := vars[name]
			switch {
			case op == ":-" && v == "":
				v = word
			case op == ":+":
				if v != "" {
					v = word
				}
			}
			b.WriteString(v)
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || isAlnum(s[j])) && !(j == i+1 && s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == i+1 {
			b.WriteByte('$')
			continue
		}
		b.WriteString(vars[s[i+1:j]])
		i = j - 1
	}
	return b.String(), nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '_' && !isAlnum(s[i]) {
			return false
		}
	}
	return true
}
