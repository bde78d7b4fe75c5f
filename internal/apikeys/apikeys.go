// Package apikeys owns the daemon's named API keys: minting them in E2B's
// format, storing only their hash, verifying a presented key, revoking by
// name, and recording when each was last used.
//
// A key is "e2b_" and 40 lowercase hex digits (160 random bits): the format
// the E2B SDKs check client-side, so the same key works as E2B_API_KEY and as
// a bearer token on hotcell's own API. Keys are random, not passwords, so a
// plain SHA-256 is the right hash: nothing to stretch, and a lookup by hash
// is an indexed equality.
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	// Prefix starts every key.
	Prefix = "e2b_"
	// hexLen is the number of hex digits after Prefix (20 random bytes).
	hexLen = 40
	// Len is the length of a key.
	Len = len(Prefix) + hexLen
	// hintLen is how much of a key ls shows: the prefix and 6 hex digits,
	// enough to tell keys apart and too little to matter (134 bits stay
	// secret).
	hintLen = len(Prefix) + 6
	// MaxNameLen bounds a key's name.
	MaxNameLen = 64
	// TouchInterval is how stale a key's recorded last use may get: a key
	// in constant use costs one write per interval, not one per request.
	TouchInterval = time.Minute
)

// Verifier checks a presented key. It is what the E2B routes need (the
// X-API-KEY header) and what hotcell's API needs (a bearer key).
type Verifier interface {
	// Verify reports the name of the key and true when key is a key that
	// exists now; a revoked, unknown or malformed key is "", false.
	Verify(ctx context.Context, key string) (name string, ok bool)
}

var _ Verifier = (*Keys)(nil)

// Keys is the set of API keys in the store. It is safe for concurrent use.
// It caches nothing about which keys exist: every Verify asks the store, so
// a revoked key fails from the moment Delete returns.
type Keys struct {
	st  *store.Store
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	// touched is when each key's last use was last written, by hash, so
	// that Verify writes at most once per TouchInterval per key.
	touched map[string]time.Time
}

// New returns the keys kept in st.
func New(st *store.Store, log *slog.Logger) *Keys {
	if log == nil {
		log = slog.Default()
	}
	return &Keys{st: st, log: log.With("component", "apikeys"), now: time.Now, touched: map[string]time.Time{}}
}

// ValidName checks a key's name: 1 to MaxNameLen letters, digits, '.', '_'
// or '-', starting with a letter or digit, so that it is safe in a URL path
// and on a terminal.
func ValidName(name string) error {
	if name == "" {
		return errdefs.Invalid("name", "must not be empty")
	}
	if len(name) > MaxNameLen {
		return errdefs.Invalid("name", "is %d bytes, the limit is %d", len(name), MaxNameLen)
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return errdefs.Invalid("name", "%q: use letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	return nil
}

// WellFormed reports whether key has the shape of a key: Prefix and 40
// lowercase hex digits. It says nothing about whether the key exists.
func WellFormed(key string) bool {
	if len(key) != Len || key[:len(Prefix)] != Prefix {
		return false
	}
	for _, c := range []byte(key[len(Prefix):]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Create mints a key named name and returns it with its description. The
// key is returned only here: the store keeps its hash. A name in use is an
// error wrapping errdefs.ErrAlreadyExists.
func (k *Keys) Create(ctx context.Context, name string) (wire.CreatedAPIKey, error) {
	if err := ValidName(name); err != nil {
		return wire.CreatedAPIKey{}, fmt.Errorf("create api key: %w", err)
	}
	var b [hexLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return wire.CreatedAPIKey{}, fmt.Errorf("create api key %q: %w", name, err)
	}
	secret := Prefix + hex.EncodeToString(b[:])
	rec := store.APIKey{Name: name, Hash: hash(secret), Hint: secret[:hintLen], CreatedAt: k.now().UTC()}
	if err := k.st.PutAPIKey(ctx, rec); err != nil {
		return wire.CreatedAPIKey{}, fmt.Errorf("create api key: %w", err)
	}
	return wire.CreatedAPIKey{APIKey: fromRecord(rec), Key: secret}, nil
}

// List describes every key, oldest first.
func (k *Keys) List(ctx context.Context) ([]wire.APIKey, error) {
	recs, err := k.st.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.APIKey, 0, len(recs))
	for _, r := range recs {
		out = append(out, fromRecord(r))
	}
	return out, nil
}

// Delete revokes the key named name: it fails from now on. A missing key is
// an error wrapping errdefs.ErrNotFound.
func (k *Keys) Delete(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("delete api key: %w", err)
	}
	return k.st.DeleteAPIKey(ctx, name)
}

// Verify implements Verifier. A malformed key is refused without a store
// lookup. The stored hash is found by the presented key's hash and then
// compared in constant time.
func (k *Keys) Verify(ctx context.Context, key string) (string, bool) {
	if !WellFormed(key) {
		return "", false
	}
	h := hash(key)
	rec, err := k.st.APIKeyByHash(ctx, h)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) && ctx.Err() == nil {
			k.log.Warn("verify api key", "err", err)
		}
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(rec.Hash), []byte(h)) != 1 {
		return "", false
	}
	k.touch(ctx, rec)
	return rec.Name, true
}

// touch records the use of a key if its last recorded use is older than
// TouchInterval. A failed write is logged and not retried before the next
// interval: the key was valid, and last-used is a hint.
func (k *Keys) touch(ctx context.Context, rec store.APIKey) {
	now := k.now()
	k.mu.Lock()
	last, ok := k.touched[rec.Hash]
	if !ok {
		last = rec.LastUsedAt // a daemon restart does not rewrite a fresh value
	}
	if now.Sub(last) < TouchInterval {
		k.mu.Unlock()
		return
	}
	k.touched[rec.Hash] = now
	// Forget keys not used for a while, so revoked keys do not pile up.
	if len(k.touched) > 1024 {
		for h, t := range k.touched {
			if now.Sub(t) >= TouchInterval {
				delete(k.touched, h)
			}
		}
	}
	k.mu.Unlock()
	// Detached: the use happened even if the caller's request is cut now.
	if err := k.st.TouchAPIKey(context.WithoutCancel(ctx), rec.Hash, now); err != nil {
		k.log.Warn("record api key use", "name", rec.Name, "err", err)
	}
}

func hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func fromRecord(r store.APIKey) wire.APIKey {
	k := wire.APIKey{Name: r.Name, Hint: r.Hint, CreatedAt: r.CreatedAt}
	if !r.LastUsedAt.IsZero() {
		t := r.LastUsedAt
		k.LastUsedAt = &t
	}
	return k
}
