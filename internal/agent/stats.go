package agent

import (
	"net/http"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// The workspace is a directory on the host's file system (a Docker volume),
// not a file system of its own, so statfs would report the host's disk: its
// usage is found by walking it, as du does, within a budget so that a stats
// call stays cheap and bounded however big the tree is.

const (
	diskWalkBudget  = 250 * time.Millisecond
	diskWalkEntries = 200_000
	maxDiskCache    = 16
)

type diskService struct {
	h *handler
	// mu serializes walks: concurrent callers wait for one walk and then
	// share its answer when it is fresh enough for them.
	mu    sync.Mutex
	cache map[string]diskCacheEntry
}

type diskCacheEntry struct {
	at time.Time
	u  wire.DiskUsage
}

// usage answers GET /v1/stats/disk?path=&maxAgeMs=: the tree's usage, from
// a walk at most maxAgeMs old (default 0: a fresh walk).
func (d *diskService) usage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		p = d.h.workspace
	}
	root, err := d.h.resolve("path", p)
	if err != nil {
		return err
	}
	maxAge, err := queryInt64(q, "maxAgeMs", 0)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.cache[root]; ok && time.Since(c.at) <= time.Duration(maxAge)*time.Millisecond {
		return writeJSON(w, http.StatusOK, c.u)
	}
	u, err := diskUsage(root, diskWalkBudget, diskWalkEntries)
	if err != nil {
		return err
	}
	if len(d.cache) >= maxDiskCache {
		clear(d.cache)
	}
	d.cache[root] = diskCacheEntry{at: time.Now(), u: u}
	return writeJSON(w, http.StatusOK, u)
}

// diskUsage walks root without following symlinks or leaving its file
// system, counting allocated blocks and each hard-linked inode once. It
// stops early, marking the result approximate, past budget or maxEntries.
func diskUsage(root string, budget time.Duration, maxEntries int) (wire.DiskUsage, error) {
	start := time.Now()
	u := wire.DiskUsage{Path: root}
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return u, fsErr("disk usage", root, err)
	}
	dev := st.Dev
	type inode struct{ dev, ino uint64 }
	seen := map[inode]struct{}{}
	count := func(st *syscall.Stat_t) {
		if st.Nlink > 1 && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			k := inode{uint64(st.Dev), st.Ino}
			if _, dup := seen[k]; dup {
				return
			}
			seen[k] = struct{}{}
		}
		u.Bytes += st.Blocks * 512
	}
	count(&st)
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		u.Files = 1
		u.DurationMs = time.Since(start).Milliseconds()
		return u, nil
	}
	u.Dirs = 1
	deadline := start.Add(budget)
	entries := 0
	stack := []string{root}
walk:
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f, err := os.Open(dir)
		if err != nil {
			u.Approximate = true // vanished or unreadable: what we have is a lower bound
			continue
		}
		for {
			names, err := f.Readdirnames(1024)
			for _, name := range names {
				entries++
				if entries > maxEntries || entries%256 == 0 && time.Now().After(deadline) {
					u.Approximate = true
					_ = f.Close()
					break walk
				}
				p := path.Join(dir, name)
				if err := syscall.Lstat(p, &st); err != nil {
					continue // removed while we walked
				}
				if st.Dev != dev {
					continue // a mount inside the tree is another disk
				}
				count(&st)
				if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					u.Dirs++
					stack = append(stack, p)
				} else {
					u.Files++
				}
			}
			if err != nil || len(names) == 0 {
				break
			}
		}
		_ = f.Close()
	}
	u.DurationMs = time.Since(start).Milliseconds()
	return u, nil
}
