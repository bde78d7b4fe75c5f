package wire

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

func TestParseFileMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    FileMode
		wantErr bool
	}{
		{"0644", 0o644, false},
		{"644", 0o644, false},
		{"0755", 0o755, false},
		{"4755", 0o4755, false},
		{"7777", 0o7777, false},
		{"0", 0, false},
		{"", 0, true},
		{"8", 0, true},
		{"0o644", 0, true},
		{"-644", 0, true},
		{"17777", 0, true},
		{"rwxr-xr-x", 0, true},
		{"99999999999999999999999", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFileMode(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseFileMode(%q): got %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "mode") {
			t.Errorf("ParseFileMode(%q): error %q does not name the mode", tt.in, err)
		}
	}
}

func TestFileModeJSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		Mode FileMode  `json:"mode"`
		Opt  *FileMode `json:"opt,omitempty"`
	}
	for _, tt := range []struct {
		in   doc
		want string
	}{
		{doc{Mode: 0o644}, `{"mode":"0644"}`},
		{doc{Mode: 0o4755}, `{"mode":"4755"}`},
		{doc{Mode: 0, Opt: ptr(FileMode(0o700))}, `{"mode":"0000","opt":"0700"}`},
	} {
		b, err := json.Marshal(tt.in)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%+v): got %s, %v; want %s", tt.in, b, err, tt.want)
			continue
		}
		var back doc
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if back.Mode != tt.in.Mode || (back.Opt == nil) != (tt.in.Opt == nil) || back.Opt != nil && *back.Opt != *tt.in.Opt {
			t.Errorf("round trip of %s: got %+v, want %+v", b, back, tt.in)
		}
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"mode":"644"}`), &d); err != nil || d.Mode != 0o644 {
		t.Errorf(`Unmarshal "644": got %v, %v; want 0644`, d.Mode, err)
	}
	for _, bad := range []string{`{"mode":"999"}`, `{"mode":420}`, `{"mode":""}`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s): got no error", bad)
		}
	}
}

func TestFileModeFS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		wire FileMode
		fs   fs.FileMode
	}{
		{0o644, 0o644},
		{0o4755, fs.ModeSetuid | 0o755},
		{0o2750, fs.ModeSetgid | 0o750},
		{0o1777, fs.ModeSticky | 0o777},
		{0o7000, fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky},
	}
	for _, tt := range tests {
		if got := tt.wire.FS(); got != tt.fs {
			t.Errorf("%v.FS(): got %v, want %v", tt.wire, got, tt.fs)
		}
		if got := FileModeOf(tt.fs | fs.ModeDir); got != tt.wire {
			t.Errorf("FileModeOf(%v): got %v, want %v", tt.fs, got, tt.wire)
		}
		if got := tt.wire.Perm(); got != tt.fs.Perm() {
			t.Errorf("%v.Perm(): got %v, want %v", tt.wire, got, tt.fs.Perm())
		}
	}
}

func ptr[T any](v T) *T { return &v }
