package sandbox

import "testing"

// TestLeftoverCreate: which unfinished creates a daemon of a set rolls
// back. Its own only at its start (later they are in flight), another
// daemon's only once that daemon is gone, an unrecorded creator's always.
func TestLeftoverCreate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		creator        string
		atStart, alive bool
		want           bool
	}{
		{"own, at start: what it did when it died", "me", true, false, true},
		{"own, reconciling: in flight here", "me", false, false, false},
		{"live other's, at start", "other", true, true, false},
		{"live other's, reconciling", "other", false, true, false},
		{"dead other's, at start", "other", true, false, true},
		{"dead other's, reconciling: died after this daemon started", "other", false, false, true},
		{"unrecorded, at start: written before creators were", "", true, false, true},
		{"unrecorded, reconciling", "", false, false, true},
	} {
		if got := leftoverCreate(tc.creator, "me", tc.atStart, tc.alive); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
