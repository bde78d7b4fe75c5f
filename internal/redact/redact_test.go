package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		secret         string // must not appear in the output
	}{
		{"password", "https://alice:s3cret@example.com/r.git", "https://REDACTED@example.com/r.git", "s3cret"},
		{"token as user name", "https://ghp_abc123@github.com/o/r.git", "https://REDACTED@github.com/o/r.git", "ghp_abc123"},
		{"docker host", "tcp://admin:pw@192.0.2.1:2376", "tcp://REDACTED@192.0.2.1:2376", "pw@"},
		{"preview token in query", "http://h/p?a=1&hotcell_preview_token=tok9&b=2", "http://h/p?a=1&hotcell_preview_token=REDACTED&b=2", "tok9"},
		{"access token and signature", "https://s3.example/o?X-Amz-Signature=abc&access_token=def&x=y", "https://s3.example/o?X-Amz-Signature=REDACTED&access_token=REDACTED&x=y", "abc"},
		{"api key", "https://api.example/v1?api_key=k1", "https://api.example/v1?api_key=REDACTED", "k1"},
		{"escaped secret name", "https://h/?api%5Fkey=k2", "https://h/?api%5Fkey=REDACTED", "k2"},
		{"bad escape in password", "https://u:p%zz@host/x", "https://REDACTED@host/x", "p%zz"},
		{"nothing secret", "https://example.com/a/b?ref=main#frag", "https://example.com/a/b?ref=main#frag", ""},
		{"unix socket", "unix:///var/run/docker.sock", "unix:///var/run/docker.sock", ""},
		{"scp-like git url", "git@example.com:o/r.git", "git@example.com:o/r.git", ""},
		{"local path", "/srv/repo.git", "/srv/repo.git", ""},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := URL(tt.in)
			if got != tt.want {
				t.Errorf("URL(%q): got %q, want %q", tt.in, got, tt.want)
			}
			if tt.secret != "" && strings.Contains(got, tt.secret) {
				t.Errorf("URL(%q) = %q still holds %q", tt.in, got, tt.secret)
			}
		})
	}
}

func TestURLWithoutUserinfo(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"https://alice:s3cret@example.com/r.git", "https://example.com/r.git"},
		{"https://ghp_abc123@github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://u:p%zz@host/x", "https://host/x"},
		{"https://example.com/r.git", "https://example.com/r.git"},
		{"git@example.com:o/r.git", "git@example.com:o/r.git"},
		{"/srv/repo.git", "/srv/repo.git"},
	}
	for _, tt := range tests {
		if got := URLWithoutUserinfo(tt.in); got != tt.want {
			t.Errorf("URLWithoutUserinfo(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"a=1&b=2", "a=1&b=2"},
		{"token=x", "token=REDACTED"},
		{"hotcell_preview_token=secret&path=%2Fa", "hotcell_preview_token=REDACTED&path=%2Fa"},
		{"Password=x&sig=y&code=z", "Password=REDACTED&sig=REDACTED&code=REDACTED"},
		{"token", "token"}, // no value, nothing to hide
		{"a=1&&token=x", "a=1&&token=REDACTED"},
		{"env=SECRET=hunter2&cols=80", "env=SECRET=REDACTED&cols=80"},
		{"env=SECRET%3Dhunter2&env=B%3dx%3Dy", "env=SECRET%3DREDACTED&env=B%3DREDACTED"},
		{"env=NOVALUE&env=", "env=REDACTED&env=REDACTED"},
		{"command=sh&env=A%3D1%26B%3D2", "command=sh&env=A%3DREDACTED"},
	}
	for _, tt := range tests {
		if got := Query(tt.in); got != tt.want {
			t.Errorf("Query(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
