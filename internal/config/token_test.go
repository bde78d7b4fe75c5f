package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hotcell/hotcell/internal/clientconfig"
)

var tokenRE = regexp.MustCompile(`^hc_[0-9a-f]{64}$`)

func TestEnsureTokenCreatesThenReads(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data") // does not exist yet
	path := filepath.Join(dir, "token")

	tok, created, err := EnsureToken(path)
	if err != nil {
		t.Fatalf("EnsureToken (new): %v", err)
	}
	if !created {
		t.Error("EnsureToken (new): created got false, want true")
	}
	if !tokenRE.MatchString(tok) {
		t.Errorf("token %q: want hc_ and 64 hex digits", tok)
	}
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{path, 0o600}, {dir, 0o700}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("%s mode: got %04o, want %04o", c.path, got, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir after EnsureToken: got %d entries, want only the token (temp file left behind?)", len(entries))
	}

	again, created, err := EnsureToken(path)
	if err != nil {
		t.Fatalf("EnsureToken (existing): %v", err)
	}
	if created || again != tok {
		t.Errorf("EnsureToken (existing): got %q, created=%v; want %q, false", again, created, tok)
	}

	// Client side: the same token through the data dir.
	cs, err := clientconfig.Resolve(clientconfig.Flags{}, envMap(map[string]string{clientconfig.EnvDataDir: dir}))
	if err != nil || cs.Token != tok {
		t.Errorf("clientconfig.Resolve: got %q, %v; want %q, nil", cs.Token, err, tok)
	}
}

func TestEnsureTokenTokensDiffer(t *testing.T) {
	t.Parallel()
	a, _, err := EnsureToken(filepath.Join(t.TempDir(), "token"))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := EnsureToken(filepath.Join(t.TempDir(), "token"))
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two new tokens are equal: %q", a)
	}
}

func TestEnsureTokenConcurrentAgree(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "token")
	const n = 8
	toks := make([]string, n)
	var created int32
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tok, c, err := EnsureToken(path)
			if err != nil {
				t.Errorf("EnsureToken: %v", err)
			}
			toks[i] = tok
			if c {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, tok := range toks {
		if tok != toks[0] {
			t.Errorf("caller %d got %q, caller 0 got %q: want one token", i, tok, toks[0])
		}
	}
	if created != 1 {
		t.Errorf("created reported %d times, want 1", created)
	}
}

func TestEnsureTokenExistingFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
		wantErr []string
	}{
		{"trimmed", "  hc_abc \n", 0o600, "hc_abc", nil},
		{"owner read only", "tok", 0o400, "tok", nil},
		{"group readable", "tok", 0o640, "", []string{"0640", "chmod 600"}},
		{"other readable", "tok", 0o604, "", []string{"0604", "chmod 600"}},
		{"empty", " \n\t", 0o600, "", []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			got, created, err := EnsureToken(path)
			if tt.wantErr == nil {
				if err != nil || got != tt.want || created {
					t.Errorf("EnsureToken: got %q, %v, %v; want %q, false, nil", got, created, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("EnsureToken: got %q, want an error", got)
			}
			for _, s := range append(tt.wantErr, path) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q: want it to contain %q", err, s)
				}
			}
			// A refused file is left alone, not replaced.
			data, _ := os.ReadFile(path)
			if string(data) != tt.content {
				t.Errorf("token file changed to %q", data)
			}
		})
	}
}
