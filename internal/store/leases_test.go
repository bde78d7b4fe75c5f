package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		const ttl = 10 * time.Second
		acquire := func(holder string, at time.Time) bool {
			t.Helper()
			ok, err := s.AcquireLease(ctx, "reaper", holder, at, ttl)
			if err != nil {
				t.Fatalf("AcquireLease(%s): %v", holder, err)
			}
			return ok
		}
		if !acquire("a", t0) {
			t.Fatal("a free lease was not given")
		}
		if acquire("b", t0.Add(ttl-time.Nanosecond)) {
			t.Error("b took a's lease before it expired")
		}
		if !acquire("a", t0.Add(ttl/2)) {
			t.Error("a could not renew its lease")
		}
		if h, exp, err := s.LeaseHolder(ctx, "reaper"); err != nil || h != "a" || !exp.Equal(t0.Add(ttl/2+ttl)) {
			t.Errorf("holder after renewal: %q until %v, %v; want a until %v", h, exp, err, t0.Add(ttl/2+ttl))
		}
		if acquire("b", t0.Add(ttl)) {
			t.Error("b took a's renewed lease before it expired")
		}
		if !acquire("b", t0.Add(ttl/2+ttl)) {
			t.Error("b could not take a's expired lease")
		}
		if err := s.ReleaseLease(ctx, "reaper", "a"); err != nil {
			t.Fatal(err)
		}
		if h, _, _ := s.LeaseHolder(ctx, "reaper"); h != "b" {
			t.Errorf("a's release of b's lease changed the holder to %q", h)
		}
		if err := s.ReleaseLease(ctx, "reaper", "b"); err != nil {
			t.Fatal(err)
		}
		if !acquire("a", t0.Add(ttl)) {
			t.Error("a released lease was not free at once")
		}
		if _, err := s.AcquireLease(ctx, "", "a", t0, ttl); err == nil {
			t.Error("a lease without a name: got nil error")
		}
	})
}

// Of many holders on several handles taking one free lease at once,
// exactly one gets it, every round.
func TestLeaseOneWinner(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		hs := openHandles(t, be, 4)
		ctx := t.Context()
		for round := range 10 {
			name := fmt.Sprintf("lease-%d", round)
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				wins []string
			)
			for i := range 12 {
				wg.Go(func() {
					holder := fmt.Sprintf("h%d", i)
					ok, err := hs[i%len(hs)].AcquireLease(ctx, name, holder, t0, time.Minute)
					if err != nil {
						t.Errorf("AcquireLease: %v", err)
						return
					}
					if ok {
						mu.Lock()
						wins = append(wins, holder)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(wins) != 1 {
				t.Errorf("round %d: %d holders got the lease (%v), want exactly 1", round, len(wins), wins)
			}
		}
	})
}
