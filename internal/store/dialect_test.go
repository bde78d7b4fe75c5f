package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT doc FROM t WHERE id = ?`, `SELECT doc FROM t WHERE id = $1`},
		{`INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = ? WHERE x <= ?`,
			`INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT (a) DO UPDATE SET b = $3 WHERE x <= $4`},
	} {
		if got := rebind(true, tt.in); got != tt.want {
			t.Errorf("rebind(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := rebind(false, tt.in); got != tt.in {
			t.Errorf("rebind for SQLite changed %q to %q", tt.in, got)
		}
	}
}

// FuzzRebind: every ? becomes the next $n, in order, and nothing else in
// the statement changes.
func FuzzRebind(f *testing.F) {
	for _, s := range []string{"", "?", "??", "SELECT ? = '' OR x = ?", "$1 ?", "é?ü?", "a?b?c?d?e?f?g?h?i?j?k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := rebind(true, q)
		if strings.Contains(got, "?") {
			t.Fatalf("rebind(%q) = %q still has a ?", q, got)
		}
		// Undo it: each $n of ours, in order, back to a ?.
		var b strings.Builder
		rest, n := got, 0
		for _, part := range strings.SplitAfter(q, "?") {
			if !strings.HasSuffix(part, "?") {
				b.WriteString(rest)
				rest = ""
				break
			}
			n++
			lit := part[:len(part)-1]
			mark := "$" + strconv.Itoa(n)
			if !strings.HasPrefix(rest, lit+mark) {
				t.Fatalf("rebind(%q) = %q: want %q then %s", q, got, lit, mark)
			}
			b.WriteString(part)
			rest = rest[len(lit)+len(mark):]
		}
		if b.String() != q || rest != "" {
			t.Fatalf("rebind(%q) = %q: undone, %q", q, got, b.String())
		}
	})
}

// A daemon pointed at a PostgreSQL that does not answer fails at start
// with where it tried, and without the URL's password.
func TestOpenPostgresUnreachable(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), "postgres://hotcell:s3cret@127.0.0.1:1/hotcell?connect_timeout=5&sslmode=disable")
	if err == nil {
		t.Fatal("Open of a closed port: got nil error")
	}
	msg := err.Error()
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error shows the password: %s", msg)
	}
	for _, want := range []string{"127.0.0.1:1", "is it running"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q: want it to say %q", msg, want)
		}
	}
	t.Logf("error reads: %v", err)
	if errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("error %v: not a schema error", err)
	}
}
