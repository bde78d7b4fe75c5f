package clientconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	withToken := t.TempDir()
	if err := os.WriteFile(filepath.Join(withToken, "token"), []byte("hc_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := t.TempDir()
	if err := os.WriteFile(filepath.Join(emptyFile, "token"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dirNotFile := t.TempDir()
	if err := os.Mkdir(filepath.Join(dirNotFile, "token"), 0o700); err != nil {
		t.Fatal(err)
	}
	missing := t.TempDir()
	tests := []struct {
		name    string
		flags   Flags
		env     map[string]string
		want    Settings
		wantErr []string // in the error; the URL is still resolved
	}{
		{"flags win", Flags{URL: "http://f:1", Token: "hc_flag"},
			map[string]string{EnvURL: "http://e:1", EnvToken: "hc_env", EnvDataDir: withToken},
			Settings{URL: "http://f:1", URLSource: SourceFlagURL, Token: "hc_flag", TokenSource: SourceFlagToken}, nil},
		{"env next", Flags{},
			map[string]string{EnvURL: "http://e:1", EnvToken: " hc_env ", EnvDataDir: withToken},
			Settings{URL: "http://e:1", URLSource: EnvURL, Token: "hc_env", TokenSource: EnvToken}, nil},
		{"token file in data dir", Flags{}, map[string]string{EnvDataDir: withToken},
			Settings{URL: DefaultURL, URLSource: SourceDefault, Token: "hc_file", TokenSource: filepath.Join(withToken, "token")}, nil},
		{"missing file", Flags{URL: "http://f:1"}, map[string]string{EnvDataDir: missing},
			Settings{URL: "http://f:1", URLSource: SourceFlagURL, TokenSource: filepath.Join(missing, "token")},
			[]string{EnvToken, filepath.Join(missing, "token"), "does not exist", "--data-dir " + missing}},
		{"empty file", Flags{}, map[string]string{EnvDataDir: emptyFile},
			Settings{URL: DefaultURL, URLSource: SourceDefault, TokenSource: filepath.Join(emptyFile, "token")},
			[]string{"file is empty"}},
		{"directory, not a file", Flags{}, map[string]string{EnvDataDir: dirNotFile},
			Settings{URL: DefaultURL, URLSource: SourceDefault, TokenSource: filepath.Join(dirNotFile, "token")},
			[]string{"not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Resolve(tt.flags, func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Errorf("got error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got no error, want one")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q: want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestHints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s                  Settings
		wantURL, wantToken string
	}{
		{Settings{URLSource: SourceFlagURL, TokenSource: SourceFlagToken}, "check --url", "--token"},
		{Settings{URLSource: EnvURL, TokenSource: EnvToken}, "check HOTCELL_URL", "HOTCELL_TOKEN"},
		{Settings{URLSource: SourceDefault, TokenSource: "/d/token"}, "set --url or HOTCELL_URL", "HOTCELL_TOKEN or /d/token"},
	}
	for _, tt := range tests {
		if got := tt.s.URLHint(); got != tt.wantURL {
			t.Errorf("%+v URLHint: got %q, want %q", tt.s, got, tt.wantURL)
		}
		if got := tt.s.TokenHint(); got != tt.wantToken {
			t.Errorf("%+v TokenHint: got %q, want %q", tt.s, got, tt.wantToken)
		}
	}
}

func TestTokenPath(t *testing.T) {
	t.Parallel()
	if got, want := TokenPath(func(string) string { return "" }), filepath.Join(DefaultDataDir, "token"); got != want {
		t.Errorf("default: got %q, want %q", got, want)
	}
	if got := TokenPath(func(k string) string { return map[string]string{EnvDataDir: "/d"}[k] }); got != "/d/token" {
		t.Errorf("from %s: got %q, want /d/token", EnvDataDir, got)
	}
}

func TestReadTokenFileCheck(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("hc_x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("refused")
	var sawMode fs.FileMode
	_, err := ReadTokenFile(path, func(_ string, fi fs.FileInfo) error { sawMode = fi.Mode().Perm(); return refuse })
	if !errors.Is(err, refuse) || sawMode != 0o644 {
		t.Errorf("with a refusing check: got %v (mode seen %v), want the check's error on mode 0644", err, sawMode)
	}
	if got, err := ReadTokenFile(path, nil); err != nil || got != "hc_x" {
		t.Errorf("without a check: got %q, %v; want hc_x", got, err)
	}
	if _, err := ReadTokenFile(filepath.Join(t.TempDir(), "none"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}
