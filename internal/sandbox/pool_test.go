package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestValidatePoolConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   wire.PoolConfig
		field string // "" when valid
	}{
		{wire.PoolConfig{Min: 0}, ""},
		{wire.PoolConfig{Min: 4, Max: 8, RefillPerSecond: 2.5}, ""},
		{wire.PoolConfig{Min: 4}, ""},
		{wire.PoolConfig{Min: -1}, "min"},
		{wire.PoolConfig{Min: MaxPoolSize + 1}, "min"},
		{wire.PoolConfig{Min: 4, Max: 3}, "max"},
		{wire.PoolConfig{Min: 1, Max: -2}, "max"},
		{wire.PoolConfig{Min: 1, RefillPerSecond: -1}, "refillPerSecond"},
		{wire.PoolConfig{Min: 1, RefillPerSecond: math.NaN()}, "refillPerSecond"},
		{wire.PoolConfig{Min: 1, RefillPerSecond: 101}, "refillPerSecond"},
	} {
		err := ValidatePoolConfig(c.cfg)
		if c.field == "" {
			if err != nil {
				t.Errorf("%+v: got %v, want valid", c.cfg, err)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: got %v, want invalid naming %s", c.cfg, err, c.field)
		}
	}
}

func TestPoolTarget(t *testing.T) {
	t.Parallel()
	now := time.Now()
	p := &pool{cfg: wire.PoolConfig{Min: 2, Max: 5}}
	if got := p.target(now); got != 2 {
		t.Errorf("no demand: got %d, want min 2", got)
	}
	for i := range 10 {
		p.recent = append(p.recent, now.Add(-time.Duration(i)*time.Second))
	}
	if got := p.target(now); got != 5 {
		t.Errorf("10 claims in the window: got %d, want max 5", got)
	}
	p.recent = []time.Time{now.Add(-2 * poolDemandWindow), now}
	if got := p.target(now); got != 3 || len(p.recent) != 1 {
		t.Errorf("one claim in the window, one before: got %d (recent %d), want 3 (1)", got, len(p.recent))
	}
	p.cfg.Max = 0 // max 0 is min
	if got := p.target(now); got != 2 {
		t.Errorf("max 0 with demand: got %d, want min 2", got)
	}
	p.removed = true
	if got := p.target(now); got != 0 {
		t.Errorf("removed: got %d, want 0", got)
	}
}

// TestPoolTake: a claim takes only a box whose key matches, and boxes
// taken by concurrent claims are all different.
func TestPoolTake(t *testing.T) {
	t.Parallel()
	ps := newPoolSet(stubPoolStore{}, nil)
	if ps != nil {
		t.Fatal("a pool set without templates must be nil (pools off)")
	}
	ps = &poolSet{byName: map[string]*pool{}, members: map[string]bool{}, kick: make(chan struct{}, 1)}
	key := poolKeyOf(1, "img:1", wire.RuntimeRunc, wire.Limits{MemoryMB: 256}, true)
	other := poolKeyOf(1, "img:1", wire.RuntimeRunc, wire.Limits{MemoryMB: 512}, true)
	const n = 200
	p := ps.configure("py", wire.PoolConfig{Min: n})
	for i := range n {
		id := fmt.Sprintf("sb-%03d", i)
		k := key
		if i%10 == 0 {
			k = other
		}
		p.ready = append(p.ready, pooledBox{id: id, key: k})
		ps.members[id] = true
	}
	var (
		mu    sync.Mutex
		taken = map[string]int{}
		wg    sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, _, ok := ps.take("py", key, nil)
				if !ok {
					return
				}
				ps.count("py", true, time.Now())
				mu.Lock()
				taken[id]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(taken) != n-n/10 {
		t.Errorf("taken: got %d boxes, want the %d that match", len(taken), n-n/10)
	}
	for id, c := range taken {
		if c != 1 {
			t.Errorf("box %s handed out %d times", id, c)
		}
		if ps.member(id) {
			t.Errorf("taken box %s is still a pool member (its events would be hidden)", id)
		}
	}
	if len(p.ready) != n/10 || p.claims != int64(len(taken)) {
		t.Errorf("left: %d ready, %d claims; want %d ready (the other key), %d claims", len(p.ready), p.claims, n/10, len(taken))
	}

	// Only boxes of other limits are left: one is taken only where they
	// can be changed, and take says what they were.
	if _, _, ok := ps.take("py", key, func(wire.Limits) bool { return false }); ok {
		t.Error("took a box of other limits the driver cannot change")
	}
	ps.mu.Lock()
	p.ready = append(p.ready, pooledBox{id: "sb-exact", key: key})
	ps.mu.Unlock()
	adjust := func(from wire.Limits) bool { return from.MemoryMB > 0 }
	if id, had, ok := ps.take("py", key, adjust); !ok || id != "sb-exact" || had != key.limits {
		t.Errorf("take with an exact match ready: got %s %+v %v, want sb-exact with its own limits", id, had, ok)
	}
	if id, had, ok := ps.take("py", key, adjust); !ok || had != other.limits || taken[id] != 0 {
		t.Errorf("take of a box to adjust: got %s %+v %v, want a box of %+v", id, had, ok, other.limits)
	}
	if _, _, ok := ps.take("py", poolKeyOf(2, "img:2", wire.RuntimeRunc, wire.Limits{}, true), adjust); ok {
		t.Error("took a box of another version")
	}
	if _, _, ok := ps.take("nope", key, adjust); ok {
		t.Error("took from a template without a pool")
	}
	p.removed = true
	if _, _, ok := ps.take("py", other, nil); ok {
		t.Error("took from a removed pool")
	}
}

type stubPoolStore struct{}

func (stubPoolStore) PutPool(ctx context.Context, name string, cfg wire.PoolConfig) error { return nil }
func (stubPoolStore) DeletePool(ctx context.Context, name string) error                   { return nil }
func (stubPoolStore) Pools(ctx context.Context) (map[string]wire.PoolConfig, error) {
	return nil, nil
}
