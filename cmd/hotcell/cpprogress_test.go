package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestCopyProgress: small copies are quiet; a large one reports its bytes
// (as plain lines when stderr is not a terminal) and passes them intact.
func TestCopyProgress(t *testing.T) {
	for _, tt := range []struct {
		size int
		want string
	}{
		{1 << 20, ""},
		{12 << 20, "copying big: 8 MiB\n"},
	} {
		var stderr bytes.Buffer
		a := &app{stderr: &stderr}
		src := bytes.Repeat([]byte{'x'}, tt.size)
		pr := a.copyProgress("copying big", bytes.NewReader(src))
		n, err := io.Copy(io.Discard, pr)
		pr.finish()
		if err != nil || n != int64(tt.size) {
			t.Errorf("copy of %d bytes: got %d, %v", tt.size, n, err)
		}
		if got := stderr.String(); !strings.HasPrefix(got, tt.want) || (tt.want == "" && got != "") {
			t.Errorf("progress of %d bytes: got %q, want %q", tt.size, got, tt.want)
		}
	}
}
