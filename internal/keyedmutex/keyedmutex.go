// Package keyedmutex provides one mutex per key (a sandbox id, say) that
// exists only while someone holds or waits for it, so a long-running daemon
// does not keep a mutex for every key it has ever seen.
package keyedmutex

import "sync"

// Map is a set of mutexes by key. The zero value is ready to use; a Map
// must not be copied after first use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry is dropped when it reaches 0
}

// Lock waits for key's mutex and returns the function that releases it.
// Call the returned function exactly once.
func (k *Map) Lock(key string) (unlock func()) {
	e := k.acquire(key)
	e.mu.Lock()
	return k.unlocker(key, e)
}

// TryLock takes key's mutex only if nobody holds it.
func (k *Map) TryLock(key string) (unlock func(), ok bool) {
	e := k.acquire(key)
	if !e.mu.TryLock() {
		k.release(key, e)
		return nil, false
	}
	return k.unlocker(key, e), true
}

// Len is the number of keys held or waited for.
func (k *Map) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

func (k *Map) acquire(key string) *entry {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e, ok := k.m[key]
	if !ok {
		e = &entry{}
		k.m[key] = e
	}
	e.refs++
	return e
}

func (k *Map) release(key string, e *entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(k.m, key)
	}
}

func (k *Map) unlocker(key string, e *entry) func() {
	return func() {
		e.mu.Unlock()
		k.release(key, e)
	}
}
