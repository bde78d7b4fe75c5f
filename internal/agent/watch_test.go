package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// watchStream is a watch request of a test agent, read event by event.
type watchStream struct {
	t      *testing.T
	events chan wire.WatchEvent
	cancel context.CancelFunc
}

func startWatch(t *testing.T, a *testAgent, q url.Values) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp := a.do(ctx, "GET", "/v1/watch", q, nil)
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		cancel()
		t.Fatalf("watch: status %d: %s", resp.StatusCode, b.String())
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content type %q, want application/x-ndjson", ct)
	}
	s := &watchStream{t: t, events: make(chan wire.WatchEvent, 1024), cancel: cancel}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		sc := newScanner(resp.Body)
		for sc.Scan() {
			// A failure line's detail is kept as "code: message".
			var ev struct {
				wire.WatchEvent
				Error *errdefs.Detail `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("event %q: %v", sc.Bytes(), err)
				return
			}
			if ev.Error != nil {
				ev.Message = ev.Error.Code + ": " + ev.Error.Message
			}
			s.events <- ev.WatchEvent
		}
	}()
	t.Cleanup(cancel)
	if ev := s.next(5 * time.Second); ev.Type != wire.WatchReady {
		t.Fatalf("first event %+v, want ready", ev)
	}
	return s
}

// next returns the next event that is not a keepalive.
func (s *watchStream) next(timeout time.Duration) wire.WatchEvent {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatalf("watch stream ended")
			}
			if ev.Type == wire.WatchKeepalive {
				continue
			}
			return ev
		case <-deadline:
			s.t.Fatalf("no watch event in %s", timeout)
		}
	}
}

// collect gathers events (without keepalives) until quiet for idle.
func (s *watchStream) collect(idle time.Duration) []wire.WatchEvent {
	s.t.Helper()
	var out []wire.WatchEvent
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			if ev.Type != wire.WatchKeepalive {
				out = append(out, ev)
			}
		case <-time.After(idle):
			return out
		}
	}
}

// short is an event without its time, relative to ws, for comparisons.
type short struct{ Type, Path, Old, FileType string }

func shorten(ws string, evs []wire.WatchEvent) []short {
	var out []short
	for _, ev := range evs {
		rel := func(p string) string {
			if p == "" {
				return ""
			}
			return strings.TrimPrefix(strings.TrimPrefix(p, ws), "/")
		}
		out = append(out, short{ev.Type, rel(ev.Path), rel(ev.OldPath), ev.FileType})
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWatchNewSubdirectory(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	w := startWatch(t, a, nil)
	sub := filepath.Join(a.ws, "sub")
	must(t, os.Mkdir(sub, 0o755))
	if ev := w.next(5 * time.Second); ev.Type != wire.WatchCreated || ev.Path != sub || ev.FileType != wire.FileTypeDir {
		t.Fatalf("got %+v, want created dir %s", ev, sub)
	}
	// Give the watcher its moment to watch sub, so that nothing here can
	// be reported twice by the scan of the new directory.
	time.Sleep(50 * time.Millisecond)
	f := filepath.Join(sub, "a.txt")
	must(t, os.WriteFile(f, []byte("one"), 0o644))
	must(t, os.WriteFile(f, []byte("two"), 0o644))
	must(t, os.Rename(f, filepath.Join(sub, "b.txt")))
	must(t, os.Remove(filepath.Join(sub, "b.txt")))
	must(t, os.Remove(sub))
	got := shorten(a.ws, w.collect(300*time.Millisecond))
	// Compact runs of modified events: how many writes a WriteFile makes
	// (truncate, write) is not what is tested here.
	got = slices.CompactFunc(got, func(x, y short) bool { return x == y && x.Type == wire.WatchModified })
	want := []short{
		{"created", "sub/a.txt", "", "file"},
		{"modified", "sub/a.txt", "", "file"},
		{"renamed", "sub/b.txt", "sub/a.txt", "file"},
		{"deleted", "sub/b.txt", "", "file"},
		{"deleted", "sub", "", "dir"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestWatchScansNewDirectory(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	w := startWatch(t, a, nil)
	// All of this is likely done before the watcher sees x: what is in it
	// must still be reported, by the scan of the new directory.
	deep := filepath.Join(a.ws, "x", "y", "z")
	must(t, os.MkdirAll(deep, 0o755))
	must(t, os.WriteFile(filepath.Join(deep, "f"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(a.ws, "x", "g"), nil, 0o644))
	got := shorten(a.ws, w.collect(300*time.Millisecond))
	for _, want := range []short{
		{"created", "x", "", "dir"},
		{"created", "x/y", "", "dir"},
		{"created", "x/y/z", "", "dir"},
		{"created", "x/y/z/f", "", "file"},
		{"created", "x/g", "", "file"},
	} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %+v in %+v", want, got)
		}
	}
	// And the new directories are watched from now on.
	must(t, os.WriteFile(filepath.Join(deep, "later"), nil, 0o644))
	if ev := w.next(5 * time.Second); ev.Type != wire.WatchCreated || ev.Path != filepath.Join(deep, "later") {
		t.Errorf("got %+v, want created %s/later", ev, deep)
	}
}

func TestWatchRenamedDirectory(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	must(t, os.MkdirAll(filepath.Join(a.ws, "d1", "in"), 0o755))
	outside := t.TempDir()
	w := startWatch(t, a, nil)
	must(t, os.Rename(filepath.Join(a.ws, "d1"), filepath.Join(a.ws, "d2")))
	if ev := w.next(5 * time.Second); ev.Type != wire.WatchRenamed || ev.Path != filepath.Join(a.ws, "d2") || ev.OldPath != filepath.Join(a.ws, "d1") {
		t.Fatalf("got %+v, want renamed d1 → d2", ev)
	}
	// The watches under it follow the new name.
	must(t, os.WriteFile(filepath.Join(a.ws, "d2", "in", "f"), nil, 0o644))
	if ev := w.next(5 * time.Second); ev.Path != filepath.Join(a.ws, "d2", "in", "f") {
		t.Fatalf("got %+v, want an event for d2/in/f", ev)
	}
	// Out of the tree: deleted, and no more events from it.
	must(t, os.Rename(filepath.Join(a.ws, "d2"), filepath.Join(outside, "d2")))
	if ev := w.next(5 * time.Second); ev.Type != wire.WatchDeleted || ev.Path != filepath.Join(a.ws, "d2") {
		t.Fatalf("got %+v, want deleted d2", ev)
	}
	must(t, os.WriteFile(filepath.Join(outside, "d2", "in", "g"), nil, 0o644))
	// Back into the tree: created, with what is in it.
	must(t, os.Rename(filepath.Join(outside, "d2"), filepath.Join(a.ws, "d3")))
	got := shorten(a.ws, w.collect(300*time.Millisecond))
	want := []short{
		{"created", "d3", "", "dir"},
		{"created", "d3/in", "", "dir"},
		{"created", "d3/in/f", "", "file"},
		{"created", "d3/in/g", "", "file"},
	}
	slices.SortFunc(got, func(x, y short) int { return strings.Compare(x.Path, y.Path) })
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestWatchExclude(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	must(t, os.MkdirAll(filepath.Join(a.ws, ".git", "objects"), 0o755))
	w := startWatch(t, a, url.Values{"exclude": {".git", "*.tmp", "build/out"}})
	must(t, os.WriteFile(filepath.Join(a.ws, ".git", "objects", "x"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(a.ws, ".git", "HEAD"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(a.ws, "a.tmp"), nil, 0o644))
	must(t, os.MkdirAll(filepath.Join(a.ws, "build", "out", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(a.ws, "build", "out", "deep", "o"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(a.ws, "kept"), nil, 0o644))
	// A rename from an excluded name into view is a create.
	must(t, os.Rename(filepath.Join(a.ws, "a.tmp"), filepath.Join(a.ws, "a")))
	got := shorten(a.ws, w.collect(300*time.Millisecond))
	want := []short{
		{"created", "build", "", "dir"},
		{"created", "kept", "", "file"},
		{"created", "a", "", "file"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestWatchNonRecursiveAndFile(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	must(t, os.Mkdir(filepath.Join(a.ws, "sub"), 0o755))
	f := filepath.Join(a.ws, "file")
	must(t, os.WriteFile(f, nil, 0o644))

	w := startWatch(t, a, url.Values{"recursive": {"false"}})
	must(t, os.WriteFile(filepath.Join(a.ws, "sub", "unseen"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(a.ws, "seen"), nil, 0o644))
	if ev := w.next(5 * time.Second); ev.Path != filepath.Join(a.ws, "seen") {
		t.Errorf("non-recursive: got %+v, want only the top-level file", ev)
	}

	fw := startWatch(t, a, url.Values{"path": {"file"}})
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	if ev := fw.next(5 * time.Second); ev.Type != wire.WatchModified || ev.Path != f || ev.FileType != wire.FileTypeFile {
		t.Errorf("file watch: got %+v, want modified %s", ev, f)
	}
}

func TestWatchRootRemoved(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	root := filepath.Join(a.ws, "root")
	must(t, os.Mkdir(root, 0o755))
	w := startWatch(t, a, url.Values{"path": {root}})
	must(t, os.Remove(root))
	evs := w.collect(2 * time.Second)
	if len(evs) == 0 || evs[len(evs)-1].Type != wire.EventStreamError || !strings.Contains(evs[len(evs)-1].Message, "not_found: watch "+root+": the watched path "+root+" was removed") {
		t.Fatalf("events %+v, want a stream.error line last", evs)
	}
	if _, open := <-w.events; open {
		t.Errorf("stream went on after its error event")
	}
}

func TestWatchDebounce(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	w := startWatch(t, a, url.Values{"debounceMs": {"200"}})
	f := filepath.Join(a.ws, "f")
	start := time.Now()
	for i := range 20 {
		must(t, os.WriteFile(f, []byte(fmt.Sprint(i)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(a.ws, "gone"), nil, 0o644))
	must(t, os.Remove(filepath.Join(a.ws, "gone")))
	ev := w.next(5 * time.Second)
	if ev.Type != wire.WatchCreated || ev.Path != f {
		t.Errorf("got %+v, want one created for %s", ev, f)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("event came after %s, before the 200ms window ended", el)
	}
	if more := w.collect(400 * time.Millisecond); len(more) != 0 {
		t.Errorf("more events after the coalesced one: %+v", more)
	}
}

func TestWatchBadInput(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, tt := range []struct {
		q     url.Values
		field string
	}{
		{url.Values{"exclude": {"[a-"}}, "exclude"},
		{url.Values{"exclude": {""}}, "exclude"},
		{url.Values{"exclude": {"ok", "bad\\"}}, "exclude"},
		{url.Values{"debounceMs": {"-1"}}, "debounceMs"},
		{url.Values{"debounceMs": {"600000"}}, "debounceMs"},
		{url.Values{"recursive": {"maybe"}}, "recursive"},
		{url.Values{"path": {"a\x00b"}}, "path"},
	} {
		eb := a.callErr("GET", "/v1/watch", tt.q, nil, 400, "")
		if !strings.Contains(eb.Error.Message, tt.field) {
			t.Errorf("%v: error %+v does not name %s", tt.q, eb.Error, tt.field)
		}
	}
	a.callErr("GET", "/v1/watch", url.Values{"path": {"/nonexistent-hotcell"}}, nil, 404, "nonexistent")
}

// countInotify counts this process's inotify instances.
func countInotify(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// Not parallel: it counts the process's inotify descriptors.
func TestWatchDisconnectFreesWatches(t *testing.T) {
	a := newTestAgent(t)
	must(t, os.MkdirAll(filepath.Join(a.ws, "a", "b"), 0o755))
	before := countInotify(t)
	var streams []*watchStream
	for range 3 {
		streams = append(streams, startWatch(t, a, nil))
	}
	if got := countInotify(t); got != before+3 {
		t.Errorf("with 3 watches open: %d inotify instances, want %d", got, before+3)
	}
	for _, s := range streams {
		s.cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for countInotify(t) != before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := countInotify(t); got != before {
		t.Errorf("after the clients hung up: %d inotify instances, want %d", got, before)
	}
}

func TestWatchOverflow(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	spec, err := parseWatch(ws, url.Values{})
	must(t, err)
	w, err := newInotifyWatcher(spec, 4)
	must(t, err)
	defer w.Close()
	go w.run()
	// Nobody reads while 50 files appear: the queue of 4 fills.
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%02d", i)), nil, 0o644))
	}
	time.Sleep(200 * time.Millisecond)
	var evs []wire.WatchEvent
	drain := func() {
		for {
			select {
			case ev := <-w.out:
				evs = append(evs, ev)
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	drain()
	i := slices.IndexFunc(evs, func(ev wire.WatchEvent) bool { return ev.Type == wire.WatchOverflow })
	if i < 0 {
		t.Fatalf("no overflow event in %+v", shorten(ws, evs))
	}
	if i != 4 {
		t.Errorf("overflow at %d, want it right after the 4 queued events: %+v", i, shorten(ws, evs))
	}
	if len(evs) >= 50 {
		t.Errorf("%d events: nothing was lost, so the overflow was false", len(evs))
	}
	// Once the reader caught up, events flow again.
	must(t, os.WriteFile(filepath.Join(ws, "after"), nil, 0o644))
	select {
	case ev := <-w.out:
		if ev.Type != wire.WatchCreated || ev.Path != filepath.Join(ws, "after") {
			t.Errorf("after the overflow: got %+v, want created after", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event after the overflow")
	}
}

func TestWatchCloseWhileBlocked(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	spec, err := parseWatch(ws, url.Values{})
	must(t, err)
	w, err := newInotifyWatcher(spec, 1)
	must(t, err)
	go w.run()
	for i := range 10 {
		must(t, os.WriteFile(filepath.Join(ws, fmt.Sprint(i)), nil, 0o644))
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { w.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs while the reader waits to deliver an overflow")
	}
}

func TestDebouncer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	ev := func(typ, p string) wire.WatchEvent { return wire.WatchEvent{Type: typ, Path: p} }
	type step struct {
		at   time.Duration
		ev   wire.WatchEvent
		want []string // "type path" sent by add
	}
	tests := []struct {
		name  string
		steps []step
		due   time.Duration
		want  []string // sent by due at t0+due
	}{
		{"modifies coalesce", []step{{0, ev("modified", "a"), nil}, {10, ev("modified", "a"), nil}}, 100, []string{"modified a"}},
		{"created then modified", []step{{0, ev("created", "a"), nil}, {10, ev("modified", "a"), nil}}, 100, []string{"created a"}},
		{"created then deleted cancel", []step{{0, ev("created", "a"), nil}, {10, ev("deleted", "a"), nil}}, 100, nil},
		{"deleted then created is modified", []step{{0, ev("deleted", "a"), nil}, {10, ev("created", "a"), nil}}, 100, []string{"modified a"}},
		{"modified then deleted", []step{{0, ev("modified", "a"), nil}, {10, ev("deleted", "a"), nil}}, 100, []string{"deleted a"}},
		{"window not over", []step{{0, ev("modified", "a"), nil}}, 50, nil},
		{"order kept", []step{{0, ev("modified", "b"), nil}, {1, ev("modified", "a"), nil}, {2, ev("modified", "b"), nil}}, 150, []string{"modified b", "modified a"}},
		{"rename flushes", []step{
			{0, ev("created", "a"), nil},
			{5, wire.WatchEvent{Type: "renamed", Path: "b", OldPath: "a"}, []string{"created a", "renamed b"}},
		}, 100, nil},
		{"re-pended after cancel", []step{
			{0, ev("created", "a"), nil}, {1, ev("deleted", "a"), nil}, {60, ev("modified", "a"), nil},
		}, 110, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDebouncer(100 * time.Millisecond)
			str := func(evs []wire.WatchEvent) []string {
				var out []string
				for _, e := range evs {
					out = append(out, e.Type+" "+e.Path)
				}
				return out
			}
			for _, s := range tt.steps {
				if got := str(d.add(s.ev, t0.Add(s.at*time.Millisecond))); !slices.Equal(got, s.want) {
					t.Errorf("add %+v: got %v, want %v", s.ev, got, s.want)
				}
			}
			if got := str(d.due(t0.Add(tt.due * time.Millisecond))); !slices.Equal(got, tt.want) {
				t.Errorf("due: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestExcludeMatch(t *testing.T) {
	t.Parallel()
	s, err := parseExcludes([]string{".git", "node_modules", "*.tmp", "build/out", "/dist/"})
	must(t, err)
	for rel, want := range map[string]bool{
		".git": true, ".git/HEAD": true, "a/.git/x": true, "a/b.tmp": true, "node_modules/x/y": true,
		"build/out": true, "build/out/x": true, "dist": true, "dist/a": true,
		"build": false, "build/outer": false, "a/build/out": false, "x.tmpl": false, "gitx": false, "": false,
	} {
		if got := s.match(rel); got != want {
			t.Errorf("match(%q) = %v, want %v", rel, got, want)
		}
	}
}

func FuzzWatchExclude(f *testing.F) {
	for _, s := range []string{".git", "*.tmp", "[a-", "a/b", "\\", "[]", "**", "/", "a\x00"} {
		f.Add(s, "a/.git/b")
	}
	f.Fuzz(func(t *testing.T, pat, rel string) {
		s, err := parseExcludes([]string{pat})
		if err != nil {
			return
		}
		// A pattern that parses never fails to match later (match ignores
		// errors, so a bad pattern that slipped through would hide nothing
		// or everything silently).
		for _, p := range append(s.segment, s.relative...) {
			for seg := range strings.SplitSeq(rel, "/") {
				if _, err := filepath.Match(p, seg); err != nil {
					t.Fatalf("pattern %q parsed but fails on %q: %v", pat, seg, err)
				}
			}
		}
		_ = s.match(rel)
	})
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	data := make([]byte, 5<<20)
	for i := range data {
		data[i] = byte(i)
	}
	must(t, os.MkdirAll(filepath.Join(a.ws, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(a.ws, "d", "e", "big"), data, 0o644))
	must(t, os.Link(filepath.Join(a.ws, "d", "e", "big"), filepath.Join(a.ws, "hard")))
	var u wire.DiskUsage
	a.call("GET", "/v1/stats/disk", nil, nil, 200, &u)
	if u.Bytes < 5<<20 || u.Bytes > 6<<20 {
		t.Errorf("bytes %d, want about 5 MiB (the hard link counted once)", u.Bytes)
	}
	if u.Files != 2 || u.Dirs != 3 || u.Approximate || u.Path != a.ws {
		t.Errorf("got %+v, want 2 files, 3 dirs, exact, path %s", u, a.ws)
	}

	// Cached within maxAgeMs; fresh without it.
	must(t, os.Remove(filepath.Join(a.ws, "hard")))
	must(t, os.Remove(filepath.Join(a.ws, "d", "e", "big")))
	var cached, fresh wire.DiskUsage
	a.call("GET", "/v1/stats/disk", url.Values{"maxAgeMs": {"60000"}}, nil, 200, &cached)
	a.call("GET", "/v1/stats/disk", nil, nil, 200, &fresh)
	if cached.Bytes != u.Bytes || fresh.Bytes >= 1<<20 {
		t.Errorf("cached %d (want %d), fresh %d (want < 1 MiB)", cached.Bytes, u.Bytes, fresh.Bytes)
	}

	a.callErr("GET", "/v1/stats/disk", url.Values{"maxAgeMs": {"x"}}, nil, 400, "maxAgeMs")
	a.callErr("GET", "/v1/stats/disk", url.Values{"path": {"/nonexistent-hotcell"}}, nil, 404, "nonexistent")

	// The budget caps the walk and says so.
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(a.ws, fmt.Sprint("f", i)), nil, 0o644))
	}
	capped, err := diskUsage(a.ws, time.Minute, 10)
	must(t, err)
	if !capped.Approximate || capped.Files+capped.Dirs > 11 {
		t.Errorf("capped walk %+v, want approximate after 10 entries", capped)
	}
}
