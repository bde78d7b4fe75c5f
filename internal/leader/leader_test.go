package leader

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
)

// eachStore runs fn as a parallel subtest on each LeaseStore: a new
// SQLite store, a new PostgreSQL database and a new namespace of the test
// Kubernetes cluster (coordination.k8s.io Leases). fn opens it: each open
// is a new connection or client, a process as far as the backend can tell.
func eachStore(t *testing.T, fn func(t *testing.T, open func() LeaseStore)) {
	sqlStore := func(target func(t *testing.T) string) func(t *testing.T) func() LeaseStore {
		return func(t *testing.T) func() LeaseStore {
			target := target(t)
			return func() LeaseStore {
				s, err := store.Open(t.Context(), target)
				if err != nil {
					t.Fatalf("open store: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
		}
	}
	for _, be := range []struct {
		name   string
		opener func(t *testing.T) func() LeaseStore
	}{
		{"sqlite", sqlStore(func(t *testing.T) string { return filepath.Join(t.TempDir(), "hotcell.db") })},
		{"postgres", sqlStore(func(t *testing.T) string { return testenv.RequirePostgres(t) })},
		{"kubernetes", kubeLeases},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			fn(t, be.opener(t))
		})
	}
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three candidates on three store handles: one leads at a time, and when
// the leader stops, another takes over.
func TestOneLeaderAndHandover(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		var (
			current, most atomic.Int32
			mu            sync.Mutex
			leaders       []string
		)
		cancels := map[string]context.CancelFunc{}
		var wg sync.WaitGroup
		for _, name := range []string{"a", "b", "c"} {
			ctx, cancel := context.WithCancel(t.Context())
			cancels[name] = cancel
			el := &StoreLease{Store: open(), Name: "reconciler", Holder: name, TTL: 3 * time.Second, Renew: 100 * time.Millisecond}
			wg.Go(func() {
				el.Run(ctx, func(ctx context.Context) {
					n := current.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					mu.Lock()
					leaders = append(leaders, name)
					mu.Unlock()
					<-ctx.Done()
					current.Add(-1)
				})
			})
		}
		defer func() {
			for _, c := range cancels {
				c()
			}
			wg.Wait()
		}()
		leader := func() string {
			mu.Lock()
			defer mu.Unlock()
			if len(leaders) == 0 {
				return ""
			}
			return leaders[len(leaders)-1]
		}
		waitFor(t, "a first leader", func() bool { return leader() != "" })
		first := leader()
		cancels[first]() // it stops: it releases the lease, another takes it
		waitFor(t, "a second leader", func() bool { return leader() != first })
		second := leader()
		cancels[second]()
		waitFor(t, "a third leader", func() bool { l := leader(); return l != first && l != second })
		if m := most.Load(); m != 1 {
			t.Errorf("%d candidates led at once, want 1", m)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(leaders) != 3 {
			t.Errorf("led in turn: %v, want each of three once", leaders)
		}
	})
}

// A leader that dies without releasing its lease (a SIGKILLed daemon)
// holds the role until the lease expires, and not a moment longer than a
// renewal period after.
func TestTakeOverAfterExpiry(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		s := open()
		const ttl = 2 * time.Second
		took := time.Now()
		if ok, err := s.AcquireLease(t.Context(), "reaper", "dead", took, ttl); err != nil || !ok {
			t.Fatalf("take the lease for the dead holder: %v, %v", ok, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		led := make(chan time.Time, 1)
		el := &StoreLease{Store: open(), Name: "reaper", Holder: "alive", TTL: ttl, Renew: 100 * time.Millisecond}
		go el.Run(ctx, func(ctx context.Context) {
			led <- time.Now()
			<-ctx.Done()
		})
		select {
		case at := <-led:
			if at.Before(took.Add(ttl)) {
				t.Errorf("led %v after the dead holder took the lease, before its %v expiry", at.Sub(took), ttl)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the live candidate never led")
		}
	})
}

// A leader whose lease another holder took (its clock had let it lapse)
// stops: its lead's context is cancelled.
func TestLeaderStepsDownWhenLeaseTaken(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		const ttl = 3 * time.Second
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		leading := make(chan struct{})
		stopped := make(chan struct{})
		el := &StoreLease{Store: open(), Name: "reaper", Holder: "a", TTL: ttl, Renew: 100 * time.Millisecond}
		done := make(chan struct{})
		go func() {
			defer close(done)
			el.Run(ctx, func(ctx context.Context) {
				close(leading)
				<-ctx.Done()
				close(stopped)
			})
		}()
		select {
		case <-leading:
		case <-time.After(20 * time.Second):
			t.Fatal("never led")
		}
		// b's clock is an hour ahead: to it, a's lease has expired.
		if ok, err := open().AcquireLease(t.Context(), "reaper", "b", time.Now().Add(time.Hour), ttl); err != nil || !ok {
			t.Fatalf("b taking the lease: %v, %v", ok, err)
		}
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Fatal("a went on leading after b took the lease")
		}
		cancel()
		<-done
	})
}

// flakyStore gives the lease once, then fails every renewal; its clock
// moves 100 ms per call.
type flakyStore struct {
	mu    sync.Mutex
	calls int
	clock time.Time
}

func (f *flakyStore) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock
}

func (f *flakyStore) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.clock = f.clock.Add(100 * time.Millisecond)
	if f.calls == 1 {
		return true, nil
	}
	return false, context.DeadlineExceeded
}

func (f *flakyStore) ReleaseLease(context.Context, string, string) error { return nil }

// A leader that cannot reach the store steps down before its lease could
// expire, by its own clock: another may take the role only after expiry,
// and by then this one has stopped.
func TestLeaderStepsDownBeforeExpiryWhenRenewalsFail(t *testing.T) {
	t.Parallel()
	f := &flakyStore{clock: time.Unix(1_700_000_000, 0)}
	const ttl = 600 * time.Millisecond
	el := &StoreLease{Store: f, Name: "r", Holder: "a", TTL: ttl, Renew: 100 * time.Millisecond, Now: f.now}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var leadAt, stopAt time.Time
	stopped := make(chan struct{})
	go el.Run(ctx, func(ctx context.Context) {
		leadAt = f.now() // the clock when it was given: what the lease counts from
		<-ctx.Done()
		stopAt = f.now()
		close(stopped)
	})
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader did not step down while renewals failed")
	}
	// The lease was given at leadAt (or 100 ms before, by the clock
	// of the call) and lasts ttl from then.
	if expiry := leadAt.Add(-100 * time.Millisecond).Add(ttl); !stopAt.Before(expiry) {
		t.Errorf("stepped down at %v past the grant, not before the lease's expiry at %v", stopAt.Sub(leadAt), ttl)
	}
}

// Of several candidates that try for a free lease at once, exactly one
// gets it, on every backend.
func TestOneWinnerOfAFreeLease(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		const n = 5
		stores := make([]LeaseStore, n)
		for i := range stores {
			stores[i] = open()
		}
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		now := time.Now()
		for i, s := range stores {
			wg.Go(func() {
				<-start
				ok, err := s.AcquireLease(t.Context(), "reaper", fmt.Sprint("c", i), now, 10*time.Second)
				if err != nil {
					t.Errorf("candidate %d: %v", i, err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if w := won.Load(); w != 1 {
			t.Errorf("%d of %d candidates got the free lease, want 1", w, n)
		}
	})
}
