package api

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestParseWatchQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      url.Values
		want    url.Values
		wantErr string // the field the 400 names
	}{
		{"defaults", url.Values{}, url.Values{"path": {"/workspace"}}, ""},
		{"relative path", url.Values{"path": {"src"}}, url.Values{"path": {"/workspace/src"}}, ""},
		{"all options", url.Values{"path": {"/tmp"}, "recursive": {"false"}, "debounceMs": {"250"}, "exclude": {".git", "*.tmp"}},
			url.Values{"path": {"/tmp"}, "recursive": {"false"}, "debounceMs": {"250"}, "exclude": {".git", "*.tmp"}}, ""},
		{"bad exclude", url.Values{"exclude": {"[a-"}}, nil, "exclude"},
		{"bad exclude later", url.Values{"exclude": {".git", "a\\"}}, nil, "exclude"},
		{"empty exclude", url.Values{"exclude": {""}}, nil, "exclude"},
		{"slash exclude", url.Values{"exclude": {"//"}}, nil, "exclude"},
		{"too many excludes", url.Values{"exclude": strings.Split(strings.Repeat("x,", 65)[:129], ",")}, nil, "exclude"},
		{"long exclude", url.Values{"exclude": {strings.Repeat("a", 257)}}, nil, "exclude"},
		{"negative debounce", url.Values{"debounceMs": {"-5"}}, nil, "debounceMs"},
		{"huge debounce", url.Values{"debounceMs": {"60001"}}, nil, "debounceMs"},
		{"word debounce", url.Values{"debounceMs": {"soon"}}, nil, "debounceMs"},
		{"bad recursive", url.Values{"recursive": {"maybe"}}, nil, "recursive"},
		{"nul path", url.Values{"path": {"a\x00b"}}, nil, "path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWatchQuery(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error naming %s", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Encode() != tt.want.Encode() {
				t.Errorf("got %s, want %s", got.Encode(), tt.want.Encode())
			}
		})
	}
}

func FuzzValidateExcludes(f *testing.F) {
	for _, s := range []string{".git", "*.tmp", "[a-", "a/b", "\\", "[]", "[^a]", "/", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pat string) {
		if validateExcludes([]string{pat}) != nil {
			return
		}
		// Accepted here means the agent's matcher can use it.
		if _, err := path.Match(pat, "anything/at/all"); err != nil {
			t.Fatalf("accepted %q, which path.Match rejects: %v", pat, err)
		}
	})
}
