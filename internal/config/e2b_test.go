package config

import (
	"strings"
	"testing"
)

func TestE2BTemplates(t *testing.T) {
	m, err := parseE2BTemplates(" code-interpreter-v1 = myorg/ci:1 ,base=hotcell/base:latest")
	if err != nil || len(m) != 2 || m["code-interpreter-v1"] != "myorg/ci:1" || m["base"] != "hotcell/base:latest" {
		t.Fatalf("got %v, %v", m, err)
	}
	if m, err := parseE2BTemplates(""); err != nil || m != nil {
		t.Errorf("empty: %v, %v", m, err)
	}
	for _, bad := range []string{"x", "=img", "a=", "a=b,a=c", "-a=b", "a b=c", "a=b c"} {
		if _, err := parseE2BTemplates(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	_, err = Load(nil, func(k string) string {
		if k == "HOTCELL_E2B_TEMPLATES" {
			return "a=b,a=c"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "e2b_templates") || !strings.Contains(err.Error(), "HOTCELL_E2B_TEMPLATES") {
		t.Errorf("bad setting from the environment: %v", err)
	}
}
