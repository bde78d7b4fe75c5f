package apikeys

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
)

// openKeys returns keys over a real SQLite store in a temp dir, with a
// clock the test moves.
func openKeys(t *testing.T) (*Keys, *store.Store, *fakeClock) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "hotcell.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	k := New(st, nil)
	k.now = clk.Now
	return k, st, clk
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// keyFormat is the format the E2B SDK checks client-side.
var keyFormat = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

func TestCreateFormatAndStorage(t *testing.T) {
	t.Parallel()
	k, st, _ := openKeys(t)
	ctx := t.Context()
	seen := map[string]bool{}
	for _, name := range []string{"ci", "agent-1", "Team.Bot_2"} {
		created, err := k.Create(ctx, name)
		rec, secret := created.APIKey, created.Key
		if err != nil {
			t.Fatalf("create %q: %v", name, err)
		}
		if !keyFormat.MatchString(secret) {
			t.Errorf("key %q does not match %v", secret, keyFormat)
		}
		if !WellFormed(secret) {
			t.Errorf("WellFormed(%q) = false, want true", secret)
		}
		if seen[secret] {
			t.Errorf("key %q minted twice", secret)
		}
		seen[secret] = true
		if rec.Name != name || rec.Hint != secret[:10] || rec.CreatedAt.IsZero() || rec.LastUsedAt != nil {
			t.Errorf("record %+v: want name %q, hint %q, a creation time and no last use", rec, name, secret[:10])
		}
	}
	// The database holds the hash, never the key.
	recs, err := st.ListAPIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("got %d stored keys, want 3", len(recs))
	}
	for _, r := range recs {
		for secret := range seen {
			if strings.Contains(r.Hash, secret[len(Prefix):]) || r.Hash == secret {
				t.Errorf("stored hash %q holds key %q", r.Hash, secret)
			}
			if r.Hash == hash(secret) {
				delete(seen, secret)
			}
		}
	}
	if len(seen) != 0 {
		t.Errorf("keys without their SHA-256 stored: %v", seen)
	}
}

func TestCreateRefuses(t *testing.T) {
	t.Parallel()
	k, _, _ := openKeys(t)
	ctx := t.Context()
	first, err := k.Create(ctx, "dup")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Create(ctx, "dup"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second create of %q: got %v, want ErrAlreadyExists", "dup", err)
	}
	// The failed create left the first key working.
	if name, ok := k.Verify(ctx, first.Key); !ok || name != "dup" {
		t.Errorf("first key after a refused duplicate: got %q, %v, want dup, true", name, ok)
	}
	for _, name := range []string{"", "-x", ".x", "a b", "a/b", "ä", "x\x1b[31m", strings.Repeat("a", MaxNameLen+1)} {
		_, err := k.Create(ctx, name)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "name") {
			t.Errorf("create %q: got %v, want an invalid argument naming the field", name, err)
		}
	}
	if _, err := k.Create(ctx, strings.Repeat("a", MaxNameLen)); err != nil {
		t.Errorf("create a %d-byte name: %v", MaxNameLen, err)
	}
}

func TestVerifyAndRevoke(t *testing.T) {
	t.Parallel()
	k, _, _ := openKeys(t)
	ctx := t.Context()
	a := mustCreate(t, k, "a")
	b := mustCreate(t, k, "b")
	for _, tc := range []struct {
		key  string
		want string
	}{
		{a, "a"},
		{b, "b"},
		{"", ""},
		{"e2b_" + strings.Repeat("0", 40), ""}, // well formed, unknown
		{strings.ToUpper(a[:4]) + a[4:], ""},   // wrong prefix case
		{a[:4] + strings.ToUpper(a[4:]), ""},   // upper-case hex
		{a + "0", ""},                          // too long
		{a[:len(a)-1], ""},                     // too short
		{"Bearer " + a, ""},                    // not stripped
		{"hc_" + a[4:], ""},                    // another prefix
		{hash(a), ""},                          // the stored hash is not a key
		{a[:len(a)-1] + flip(a[len(a)-1]), ""}, // one digit off
	} {
		name, ok := k.Verify(ctx, tc.key)
		if name != tc.want || ok != (tc.want != "") {
			t.Errorf("Verify(%q) = %q, %v; want %q, %v", tc.key, name, ok, tc.want, tc.want != "")
		}
	}

	if err := k.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if name, ok := k.Verify(ctx, a); ok {
		t.Errorf("revoked key: Verify = %q, true; want refused", name)
	}
	if name, ok := k.Verify(ctx, b); !ok || name != "b" {
		t.Errorf("the other key after a revoke: got %q, %v, want b, true", name, ok)
	}
	if err := k.Delete(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete a revoked key: got %v, want ErrNotFound", err)
	}
	if err := k.Delete(ctx, "a/b"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("delete a bad name: got %v, want ErrInvalidArgument", err)
	}
	// The name is free again, and the new key is another key.
	a2 := mustCreate(t, k, "a")
	if _, ok := k.Verify(ctx, a); ok || a2 == a {
		t.Errorf("re-created name: the old key still verifies (%v) or was minted again (%v)", ok, a2 == a)
	}
}

// TestLastUsed checks that a use is recorded, and that constant use is
// written at most once per TouchInterval.
func TestLastUsed(t *testing.T) {
	t.Parallel()
	k, st, clk := openKeys(t)
	ctx := t.Context()
	key := mustCreate(t, k, "busy")
	lastUsed := func() time.Time {
		t.Helper()
		ks, err := k.List(ctx)
		if err != nil || len(ks) != 1 {
			t.Fatalf("list: %v, %d keys", err, len(ks))
		}
		if ks[0].LastUsedAt == nil {
			return time.Time{}
		}
		return *ks[0].LastUsedAt
	}
	if got := lastUsed(); !got.IsZero() {
		t.Fatalf("unused key: last used %v, want zero", got)
	}
	first := clk.Now()
	k.Verify(ctx, key)
	if got := lastUsed(); !got.Equal(first) {
		t.Fatalf("after a use: last used %v, want %v", got, first)
	}
	for range 100 {
		clk.Add(time.Second / 2)
		k.Verify(ctx, key)
	}
	if got := lastUsed(); !got.Equal(first) {
		t.Errorf("after 50 s of use: last used %v, want still %v (one write per %v)", got, first, TouchInterval)
	}
	clk.Add(TouchInterval)
	k.Verify(ctx, key)
	if got, want := lastUsed(), clk.Now(); !got.Equal(want) {
		t.Errorf("after a minute: last used %v, want %v", got, want)
	}

	// A restarted daemon (a new Keys) does not rewrite a fresh last use,
	// and a write for a revoked key does not bring it back.
	k2 := New(st, nil)
	k2.now = clk.Now
	clk.Add(time.Second)
	k2.Verify(ctx, key)
	if got, want := lastUsed(), clk.Now().Add(-time.Second); !got.Equal(want) {
		t.Errorf("after a restart: last used %v, want %v", got, want)
	}
	if err := k.Delete(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.ListAPIKeys(ctx)
	if len(rec) != 0 {
		t.Errorf("after revoke: %d keys, want 0", len(rec))
	}
	if err := st.TouchAPIKey(ctx, hash(key), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Verify(ctx, key); ok {
		t.Error("a revoked key verified after a touch")
	}
}

func mustCreate(t *testing.T, k *Keys, name string) string {
	t.Helper()
	c, err := k.Create(t.Context(), name)
	if err != nil {
		t.Fatalf("create %q: %v", name, err)
	}
	return c.Key
}

func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}
