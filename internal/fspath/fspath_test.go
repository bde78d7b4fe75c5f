package fspath

import "testing"

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\`: `/x\`, `/t\011`: "/t\t"} {
		if got := UnescapeMount(in); got != want {
			t.Errorf("UnescapeMount(%q): got %q, want %q", in, got, want)
		}
	}
}
