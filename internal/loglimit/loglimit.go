// Package loglimit rate-limits log lines by key (a sandbox id), so that what
// a sandbox does cannot flood the daemon's log: each key gets a few lines per
// interval, and the next line let through says how many were dropped.
package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter lets through at most Per lines per key in each interval of Every.
// The zero value is not usable; use New.
type Limiter struct {
	per   int
	every time.Duration

	mu   sync.Mutex
	keys map[string]*window
}

type window struct {
	start   time.Time
	n       int // lines let through in this window
	dropped int // lines dropped since the last one let through
}

// maxKeys bounds the map: past it, keys with nothing to report are pruned.
const maxKeys = 4096

// New returns a limiter of per lines per key in every interval.
func New(per int, every time.Duration) *Limiter {
	return &Limiter{per: per, every: every, keys: map[string]*window{}}
}

// Allow reports whether a line for key may be logged at now, and if so how
// many lines for key were dropped since the last one let through.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= maxKeys {
			l.prune(now)
		}
		w = &window{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= l.every {
		w.start, w.n = now, 0
	}
	if w.n >= l.per {
		w.dropped++
		return false, 0
	}
	w.n++
	dropped, w.dropped = w.dropped, 0
	return true, dropped
}

// prune forgets keys whose interval is over and that have nothing to
// report; when all are live, it forgets one at random (its drop count is
// lost) so that the map stays bounded.
func (l *Limiter) prune(now time.Time) {
	for k, w := range l.keys {
		if w.dropped == 0 && now.Sub(w.start) >= l.every {
			delete(l.keys, k)
		}
	}
	for k := range l.keys {
		if len(l.keys) < maxKeys {
			break
		}
		delete(l.keys, k)
	}
}

// Log logs msg with args on log at level when the limiter lets a line for
// key through; the line then carries droppedLines when lines were dropped
// before it.
func (l *Limiter) Log(ctx context.Context, log *slog.Logger, key string, level slog.Level, msg string, args ...any) {
	if !log.Enabled(ctx, level) {
		return
	}
	ok, dropped := l.Allow(key, time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		args = append(args, "droppedLines", dropped)
	}
	log.Log(ctx, level, msg, args...)
}

// Forget drops what the limiter holds for key (its sandbox is gone) and
// returns how many of its lines were dropped and not yet reported.
func (l *Limiter) Forget(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	delete(l.keys, key)
	if w == nil {
		return 0
	}
	return w.dropped
}
