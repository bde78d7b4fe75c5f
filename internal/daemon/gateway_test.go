package daemon

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestRecentAddrs: a pod's address is read once for a burst of calls,
// a failed read is not kept, and with no time to keep every call reads.
func TestRecentAddrs(t *testing.T) {
	t.Parallel()
	reads := 0
	fail := false
	lookup := func(_ context.Context, id string) (netip.Addr, error) {
		reads++
		if fail {
			return netip.Addr{}, errors.New("api server away")
		}
		return netip.MustParseAddr("10.244.0.9"), nil
	}
	r := newRecentAddrs(lookup, time.Hour)
	fail = true
	if _, err := r.get(t.Context(), "sb-a"); err == nil {
		t.Fatal("a failed read: got no error")
	}
	fail = false
	for range 3 {
		if a, err := r.get(t.Context(), "sb-a"); err != nil || a != netip.MustParseAddr("10.244.0.9") {
			t.Fatalf("got %v, %v; want 10.244.0.9", a, err)
		}
	}
	if reads != 2 {
		t.Errorf("reads: got %d, want 2 (the failed one is not kept, then one for three calls)", reads)
	}
	reads = 0
	r = newRecentAddrs(lookup, 0)
	for range 3 {
		r.get(t.Context(), "sb-a")
	}
	if reads != 3 {
		t.Errorf("reads with nothing kept: got %d, want 3", reads)
	}
}
