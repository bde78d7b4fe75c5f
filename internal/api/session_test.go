package api

import (
	"testing"
	"time"
)

// TestSessionTable: a session is found by its id until it expires or is
// removed, ids and CSRF tokens are random and distinct, and a full table
// drops its oldest session rather than grow.
func TestSessionTable(t *testing.T) {
	t.Parallel()
	ss := newSessions()
	a := ss.add("key-a", caller{key: "a"}, time.Hour)
	b := ss.add("key-b", caller{key: "b"}, -time.Second) // already expired
	if a.id == "" || a.id == a.csrf || a.id == b.id || a.csrf == b.csrf || len(a.id) < 40 {
		t.Fatalf("ids and CSRF tokens are not distinct random tokens: %+v %+v", a, b)
	}
	if got, ok := ss.get(a.id); !ok || got.caller.key != "a" {
		t.Errorf("get(a) = %+v, %v; want session of key a", got, ok)
	}
	if _, ok := ss.get(b.id); ok {
		t.Error("an expired session was found")
	}
	if _, ok := ss.m[b.id]; ok {
		t.Error("an expired session stayed in the table after get")
	}
	ss.remove(a.id)
	if _, ok := ss.get(a.id); ok {
		t.Error("a removed session was found")
	}

	ss.max = 100
	first := ss.add("k", caller{}, time.Hour)
	for range ss.max - 1 {
		ss.add("k", caller{}, time.Hour)
	}
	if len(ss.m) != ss.max {
		t.Fatalf("table holds %d sessions, want %d", len(ss.m), ss.max)
	}
	last := ss.add("k", caller{}, time.Hour)
	if len(ss.m) != ss.max {
		t.Errorf("a full table grew to %d", len(ss.m))
	}
	if _, ok := ss.get(first.id); ok {
		t.Error("a full table kept its oldest session")
	}
	if _, ok := ss.get(last.id); !ok {
		t.Error("a full table refused the new session")
	}
}
