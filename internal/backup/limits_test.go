package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// memStore keeps backup records in memory (newest first, as the store lists them).
type memStore struct {
	mu      sync.Mutex
	backups []wire.Backup
}

func (m *memStore) PutBackup(_ context.Context, b wire.Backup) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backups = append([]wire.Backup{b}, m.backups...)
	return nil
}

func (m *memStore) GetBackup(_ context.Context, sandboxID, id string) (wire.Backup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.backups {
		if b.SandboxID == sandboxID && b.ID == id {
			return b, nil
		}
	}
	return wire.Backup{}, errdefs.ErrNotFound
}

func (m *memStore) ListBackups(_ context.Context, sandboxID string) ([]wire.Backup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []wire.Backup
	for _, b := range m.backups {
		if sandboxID == "" || b.SandboxID == sandboxID {
			out = append(out, b)
		}
	}
	return out, nil
}

func (m *memStore) DeleteBackup(_ context.Context, sandboxID, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, b := range m.backups {
		if b.SandboxID == sandboxID && b.ID == id {
			m.backups = append(m.backups[:i], m.backups[i+1:]...)
			return nil
		}
	}
	return nil
}

func (m *memStore) PutSnapshot(context.Context, wire.Snapshot) error { return nil }
func (m *memStore) GetSnapshot(context.Context, string, string) (wire.Snapshot, error) {
	return wire.Snapshot{}, errdefs.ErrNotFound
}
func (m *memStore) ListSnapshots(context.Context, string) ([]wire.Snapshot, error) { return nil, nil }
func (m *memStore) DeleteSnapshot(context.Context, string, string) error           { return nil }

type fakeSandboxes struct{}

func (fakeSandboxes) Get(_ context.Context, id string) (wire.Sandbox, error) {
	return wire.Sandbox{ID: id}, nil
}
func (fakeSandboxes) Agent(context.Context, string) (*agentconn.Conn, error) {
	return nil, errdefs.ErrConflict
}
func (fakeSandboxes) Hold(context.Context, string) (func(), error) {
	return func() {}, nil
}
func (fakeSandboxes) Event(context.Context, string, string, string, map[string]string) {}

func newTestService(t *testing.T, l Limits, free func() int64) (*Service, *memStore) {
	t.Helper()
	st := &memStore{}
	s := New(Options{Dir: t.TempDir(), Store: st, Sandboxes: fakeSandboxes{}, Limits: l})
	s.statfs = func(string) (int64, error) { return free(), nil }
	if err := s.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, st
}

func plenty() int64 { return 1 << 40 }

func TestQuotaUsed(t *testing.T) {
	t.Parallel()
	list := []wire.Backup{ // newest first
		{ID: "b4", Size: 1, Source: SourceBackup},
		{ID: "s1", Size: 10, Source: SourceSnapshot},
		{ID: "b3", Size: 100, Source: SourceUpload},
		{ID: "b2", Size: 1000, Source: SourceBackup},
		{ID: "b1", Size: 10000, Source: SourceBackup},
	}
	for _, tc := range []struct {
		keep int
		want int64
	}{
		{0, 11111},   // a snapshot's workspace prunes nothing
		{1, 10},      // only the new one stays: snapshots always count
		{2, 11},      // b4 and the new one
		{3, 111},     // b4, b3 and the new one
		{10, 11111},  // nothing goes
		{4, 1111},    // b1 goes
		{5, 11111},   // nothing goes
		{100, 11111}, // nothing goes
	} {
		if got := quotaUsed(list, tc.keep); got != tc.want {
			t.Errorf("keep %d: got %d, want %d", tc.keep, got, tc.want)
		}
	}
}

func TestCapReader(t *testing.T) {
	t.Parallel()
	capErr := errors.New("over")
	for _, tc := range []struct {
		n, max  int64
		wantErr bool
	}{
		{10, 10, false},
		{11, 10, true},
		{1 << 20, 1000, true},
		{1 << 20, 0, false}, // no cap
	} {
		r := &capReader{r: bytes.NewReader(make([]byte, tc.n)), max: tc.max, err: capErr}
		got, err := io.Copy(io.Discard, r)
		if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, capErr)) {
			t.Errorf("%d bytes, cap %d: got %v, want error %v", tc.n, tc.max, err, tc.wantErr)
		}
		if tc.max > 0 && got > tc.max+1 {
			t.Errorf("%d bytes, cap %d: %d bytes got through", tc.n, tc.max, got)
		}
	}
}

// wantLimit checks that err is a LimitError of setting with the status class.
func wantLimit(t *testing.T, err error, setting string, class error) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || le.Setting != setting {
		t.Fatalf("got %v, want a %s limit error", err, setting)
	}
	if !errors.Is(err, class) {
		t.Errorf("got class of %v, want %v", err, class)
	}
}

// wantNoFiles checks that no backup file, finished or temp, is left.
func wantNoFiles(t *testing.T, s *Service, st *memStore, n int) {
	t.Helper()
	var files []string
	_ = filepath.WalkDir(s.root(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != n {
		t.Errorf("got files %v, want %d", files, n)
	}
	if len(st.backups) != n {
		t.Errorf("got records %v, want %d", st.backups, n)
	}
}

func TestUploadOverMaxSize(t *testing.T) {
	t.Parallel()
	s, st := newTestService(t, Limits{MaxSize: 64 << 10}, plenty)
	ctx := t.Context()
	if _, err := s.Upload(ctx, "sb", bytes.NewReader(testTar(t, "a", "b"))); err != nil {
		t.Fatalf("a small upload: %v", err)
	}
	// An endless stream: a tar header, then zeros for ever.
	endless := io.MultiReader(bytes.NewReader(testTar(t, "a")[:512]), zeroReader{})
	_, err := s.Upload(ctx, "sb", endless)
	wantLimit(t, err, SettingMaxSize, errdefs.ErrTooLarge)
	if status, _ := errdefs.HTTPStatus(err); status != 413 {
		t.Errorf("got status %d, want 413", status)
	}
	wantNoFiles(t, s, st, 1)
}

func TestQuota(t *testing.T) {
	t.Parallel()
	s, st := newTestService(t, Limits{Quota: 100 << 10}, plenty)
	ctx := t.Context()
	big := bigTar(t, 60<<10)
	if _, err := s.Upload(ctx, "sb", bytes.NewReader(big)); err != nil {
		t.Fatalf("first upload: %v", err)
	}
	// The second passes the quota while it streams: aborted, removed.
	_, err := s.Upload(ctx, "sb", bytes.NewReader(big))
	wantLimit(t, err, SettingQuota, errdefs.ErrInsufficientStorage)
	if status, _ := errdefs.HTTPStatus(err); status != 507 {
		t.Errorf("got status %d, want 507", status)
	}
	wantNoFiles(t, s, st, 1)
	// Another sandbox has its own quota.
	if _, err := s.Upload(ctx, "other", bytes.NewReader(big)); err != nil {
		t.Fatalf("another sandbox's upload: %v", err)
	}
	// A full quota refuses before anything is written.
	st.backups[1].Size = 100 << 10
	_, err = s.Upload(ctx, "sb", bytes.NewReader(testTar(t, "a")))
	wantLimit(t, err, SettingQuota, errdefs.ErrInsufficientStorage)
}

func TestQuotaCountsRetention(t *testing.T) {
	t.Parallel()
	s, st := newTestService(t, Limits{Quota: 100 << 10}, plenty)
	s.opts.Keep = 1
	ctx := t.Context()
	big := bigTar(t, 60<<10)
	for i := range 3 {
		// With keep 1 each upload replaces the last: the quota holds one.
		if _, err := s.Upload(ctx, "sb", bytes.NewReader(big)); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	wantNoFiles(t, s, st, 1)
}

func TestMinFree(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	free := int64(10 << 20)
	getFree := func() int64 { mu.Lock(); defer mu.Unlock(); return free }
	s, st := newTestService(t, Limits{MinFree: 8 << 20}, getFree)
	ctx := t.Context()
	if _, err := s.Upload(ctx, "sb", bytes.NewReader(bigTar(t, 1<<20))); err != nil {
		t.Fatalf("an upload that fits: %v", err)
	}
	// It would leave less than the reserve: aborted and removed.
	_, err := s.Upload(ctx, "sb", bytes.NewReader(bigTar(t, 3<<20)))
	wantLimit(t, err, SettingMinFree, errdefs.ErrInsufficientStorage)
	wantNoFiles(t, s, st, 1)

	// Below the reserve: refused before it starts.
	mu.Lock()
	free = 7 << 20
	mu.Unlock()
	_, err = s.Upload(ctx, "sb", bytes.NewReader(testTar(t, "a")))
	wantLimit(t, err, SettingMinFree, errdefs.ErrInsufficientStorage)
	wantNoFiles(t, s, st, 1)
}

func TestMinFreeRechecked(t *testing.T) {
	t.Parallel()
	// Someone else fills the disk while the backup writes: each check
	// finds less free space.
	var mu sync.Mutex
	free := int64(1 << 30)
	getFree := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		free -= 256 << 20
		return free
	}
	s, st := newTestService(t, Limits{MinFree: 512 << 20}, getFree)
	_, err := s.Upload(t.Context(), "sb", bytes.NewReader(bigTar(t, 3*freeCheckEvery)))
	wantLimit(t, err, SettingMinFree, errdefs.ErrInsufficientStorage)
	wantNoFiles(t, s, st, 0)
}

func TestStallGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	g := newStallGuard(20*time.Millisecond, cancel)
	defer g.stop()
	// A stream that sends a little, then nothing until it is cancelled.
	r := g.reader(io.MultiReader(bytes.NewReader([]byte("abc")), ctxReader{ctx}))
	_, err := io.Copy(io.Discard, r)
	wantLimit(t, g.err(err), SettingIdleTimeout, errdefs.ErrDeadlineExceeded)

	// A stream that ends is not a stall.
	g2 := newStallGuard(time.Hour, func() {})
	defer g2.stop()
	_, err = io.Copy(io.Discard, g2.reader(bytes.NewReader([]byte("abc"))))
	if err := g2.err(err); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}

type ctxReader struct{ ctx context.Context }

func (c ctxReader) Read([]byte) (int, error) {
	<-c.ctx.Done()
	return 0, c.ctx.Err()
}

// bigTar is a tar with one file of n random-looking (incompressible) bytes.
func bigTar(t testing.TB, n int) []byte {
	t.Helper()
	body := make([]byte, n)
	x := uint32(1)
	for i := range body {
		x = x*1664525 + 1013904223
		body[i] = byte(x >> 24)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
