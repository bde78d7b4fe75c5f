package keyedmutex

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestForgetsUnusedKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, k *Map)
	}{
		{"lock and unlock", func(t *testing.T, k *Map) {
			unlock := k.Lock("a")
			if got := k.Len(); got != 1 {
				t.Errorf("while held: got %d keys, want 1", got)
			}
			unlock()
		}},
		{"many keys", func(t *testing.T, k *Map) {
			var unlocks []func()
			for _, key := range []string{"a", "b", "c"} {
				unlocks = append(unlocks, k.Lock(key))
			}
			if got := k.Len(); got != 3 {
				t.Errorf("while held: got %d keys, want 3", got)
			}
			for _, u := range unlocks {
				u()
			}
		}},
		{"trylock taken then released", func(t *testing.T, k *Map) {
			unlock, ok := k.TryLock("a")
			if !ok {
				t.Fatal("TryLock of a free key: got false, want true")
			}
			unlock()
		}},
		{"trylock refused", func(t *testing.T, k *Map) {
			unlock := k.Lock("a")
			if _, ok := k.TryLock("a"); ok {
				t.Fatal("TryLock of a held key: got true, want false")
			}
			if got := k.Len(); got != 1 {
				t.Errorf("after a refused TryLock: got %d keys, want 1", got)
			}
			unlock()
		}},
		{"waiter keeps the key until it is done", func(t *testing.T, k *Map) {
			unlock := k.Lock("a")
			got := make(chan func())
			go func() { got <- k.Lock("a") }()
			waitFor(t, func() bool { return refs(k, "a") == 2 })
			unlock()
			if n := k.Len(); n != 1 {
				t.Errorf("handed to a waiter: got %d keys, want 1", n)
			}
			(<-got)()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var k Map
			tt.run(t, &k)
			if got := k.Len(); got != 0 {
				t.Errorf("after every unlock: got %d keys, want 0", got)
			}
		})
	}
}

func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	var k Map
	type counter struct{ inside, done, overlaps int } // guarded by k's mutex of its key
	counters := map[string]*counter{"a": {}, "b": {}, "c": {}}
	keys := []string{"a", "b", "c"}
	const workers, rounds = 8, 300
	var locked atomic.Int64 // critical sections entered
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := keys[(w+i)%len(keys)]
				var unlock func()
				if i%3 == 0 {
					var ok bool
					if unlock, ok = k.TryLock(key); !ok {
						continue
					}
				} else {
					unlock = k.Lock(key)
				}
				locked.Add(1)
				c := counters[key]
				c.inside++
				if c.inside != 1 {
					c.overlaps++
				}
				runtime.Gosched() // give another holder the chance to break in
				c.done++
				c.inside--
				unlock()
			}
		})
	}
	wg.Wait()
	done := 0
	for key, c := range counters {
		if c.overlaps != 0 {
			t.Errorf("key %s: held by two goroutines at once %d times", key, c.overlaps)
		}
		done += c.done
	}
	if int64(done) != locked.Load() {
		// A lost update means two holders ran c.done++ at once.
		t.Errorf("got %d completed critical sections, want %d", done, locked.Load())
	}
	if got := k.Len(); got != 0 {
		t.Errorf("after all workers: got %d keys, want 0", got)
	}
}

// refs is how many holders and waiters key has.
func refs(k *Map, key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.m[key]; ok {
		return e.refs
	}
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatal("condition never held")
		}
		runtime.Gosched()
	}
}
