package e2e

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
)

// nextWatch returns the next event or fails after timeout.
func nextWatch(t *testing.T, w *client.WatchStream, timeout time.Duration) client.WatchEvent {
	t.Helper()
	type res struct {
		ev  client.WatchEvent
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ev, err := w.Next()
		ch <- res{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("watch: %v", r.err)
		}
		return r.ev
	case <-time.After(timeout):
		w.Close()
		t.Fatalf("no watch event in %s", timeout)
	}
	return client.WatchEvent{}
}

// collectWatch reads events until wanted reports it has seen what it needs.
func collectWatch(t *testing.T, w *client.WatchStream, timeout time.Duration, done func([]client.WatchEvent) bool) []client.WatchEvent {
	t.Helper()
	var evs []client.WatchEvent
	deadline := time.Now().Add(timeout)
	for !done(evs) {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("watch: timed out; got %s", describe(evs))
		}
		evs = append(evs, nextWatch(t, w, left))
	}
	return evs
}

func describe(evs []client.WatchEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString("\n  " + ev.Type + " " + ev.FileType + " " + ev.Path)
		if ev.OldPath != "" {
			b.WriteString(" (from " + ev.OldPath + ")")
		}
	}
	return b.String()
}

func has(evs []client.WatchEvent, typ, path string) bool {
	return slices.ContainsFunc(evs, func(ev client.WatchEvent) bool { return ev.Type == typ && ev.Path == path })
}

func TestWatchNewSubdirectory(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		w, err := d.C.Watch(t.Context(), sb.ID, client.WatchOptions{Exclude: []string{".git"}})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Close()
		if w.Root != "/workspace" {
			t.Errorf("root %q, want /workspace", w.Root)
		}

		// The subdirectory is created after the watch started, and written to
		// at once: the file must be seen however the race with the new
		// directory's watch goes.
		mustOK(t, run(t, d, sb.ID, "mkdir -p /workspace/new/deeper && echo one > /workspace/new/deeper/f"), "create")
		evs := collectWatch(t, w, 10*time.Second, func(evs []client.WatchEvent) bool {
			return has(evs, client.WatchCreated, "/workspace/new/deeper/f")
		})
		for _, p := range []string{"/workspace/new", "/workspace/new/deeper"} {
			if !slices.ContainsFunc(evs, func(ev client.WatchEvent) bool {
				return ev.Type == client.WatchCreated && ev.Path == p && ev.FileType == client.FileTypeDir
			}) {
				t.Errorf("no created dir event for %s in %s", p, describe(evs))
			}
		}

		mustOK(t, run(t, d, sb.ID, "echo two >> /workspace/new/deeper/f"), "modify")
		collectWatch(t, w, 10*time.Second, func(evs []client.WatchEvent) bool {
			return has(evs, client.WatchModified, "/workspace/new/deeper/f")
		})

		mustOK(t, run(t, d, sb.ID, "mv /workspace/new/deeper/f /workspace/new/deeper/g"), "rename")
		evs = collectWatch(t, w, 10*time.Second, func(evs []client.WatchEvent) bool {
			return has(evs, client.WatchRenamed, "/workspace/new/deeper/g")
		})
		if ev := evs[len(evs)-1]; ev.OldPath != "/workspace/new/deeper/f" || ev.FileType != client.FileTypeFile {
			t.Errorf("rename event %+v, want oldPath /workspace/new/deeper/f, a file", ev)
		}

		mustOK(t, run(t, d, sb.ID, "rm /workspace/new/deeper/g"), "delete")
		collectWatch(t, w, 10*time.Second, func(evs []client.WatchEvent) bool {
			return has(evs, client.WatchDeleted, "/workspace/new/deeper/g")
		})

		// Nothing under .git is reported; the marker after it proves the
		// stream got that far.
		mustOK(t, run(t, d, sb.ID, "mkdir -p /workspace/.git/objects && echo x > /workspace/.git/objects/o && echo x > /workspace/.git/HEAD && touch /workspace/marker"), "git writes")
		evs = collectWatch(t, w, 10*time.Second, func(evs []client.WatchEvent) bool {
			return has(evs, client.WatchCreated, "/workspace/marker")
		})
		for _, ev := range evs {
			if strings.Contains(ev.Path, ".git") {
				t.Errorf("excluded path reported: %+v", ev)
			}
		}
	})
}

func TestWatchBadInput(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	for _, tc := range []struct {
		opts  client.WatchOptions
		field string
	}{
		{client.WatchOptions{Exclude: []string{"[a-"}}, "exclude"},
		{client.WatchOptions{Exclude: []string{"ok", "x\\"}}, "exclude"},
		{client.WatchOptions{Debounce: 2 * time.Minute}, "debounceMs"},
		{client.WatchOptions{Path: "/workspace/a\x00b"}, "path"},
	} {
		_, err := d.C.Watch(t.Context(), sb.ID, tc.opts)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, tc.field) {
			t.Errorf("watch %+v: got %v, want a 400 naming %s", tc.opts, err, tc.field)
		}
	}
	if _, err := d.C.Watch(t.Context(), sb.ID, client.WatchOptions{Path: "/nonexistent"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("watch of a missing path: got %v, want not found", err)
	}
}

func TestWatchDisconnectFreesWatches(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, "mkdir -p /workspace/a/b/c"), "mkdir")
	count := func() int {
		out := mustOK(t, run(t, d, sb.ID, "ls -l /proc/1/fd | grep -c inotify || true"), "count inotify fds")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("count inotify fds: %q", out)
		}
		return n
	}
	before := count()
	var ws []*client.WatchStream
	for range 3 {
		w, err := d.C.Watch(t.Context(), sb.ID, client.WatchOptions{})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		ws = append(ws, w)
	}
	if got := count(); got != before+3 {
		t.Errorf("with 3 watches: %d inotify instances in the agent, want %d", got, before+3)
	}
	for _, w := range ws {
		w.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() != before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := count(); got != before {
		t.Errorf("after the clients hung up: %d inotify instances in the agent, want %d", got, before)
	}
}
