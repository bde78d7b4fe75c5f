package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// Why read cgroup files: the engine's stats endpoint, even with one-shot,
// waits for its stats collector, which sleeps a second between rounds
// (measured here on Docker 20.10: the first call after a quiet spell takes
// 10ms, every call within the next second takes 1s). The daemon runs on the
// engine's host as root, so it reads the same kernel counters the engine
// would, from the box's cgroup and network namespace, in well under a
// millisecond. Where that is not possible (a remote engine, a daemon in a
// container of its own, an unknown cgroup layout) the driver falls back to
// the engine's endpoint.

// cgroupReader reads boxes' counters from the host's cgroup and proc file
// systems. It caches where each box lives (its init pid and cgroup dirs)
// and checks on every read that the pid still belongs to the same cgroup.
type cgroupReader struct {
	root     string // the cgroup mount, /sys/fs/cgroup
	proc     string // /proc
	mu       sync.Mutex
	boxes    map[string]*cgroupBox
	disabled bool // a lookup failed for a running box: use the engine
	memTotal int64
}

type cgroupBox struct {
	pid     int
	v2      bool
	self    []byte // /proc/<pid>/cgroup when found
	cpu     string // dir with cpuacct.usage (v1) or cpu.stat (v2)
	memory  string
	pids    string
	usedAt  time.Time
	limitOK bool
	// gvisor: the cgroup holds gVisor's kernel, whose host tasks are not
	// the sandbox's processes (gvisor.go).
	gvisor bool
}

func newCgroupReader() *cgroupReader {
	return &cgroupReader{root: "/sys/fs/cgroup", proc: "/proc", boxes: map[string]*cgroupBox{}}
}

// cgroupReaders holds one reader per engine endpoint (so, in practice,
// one): kept here rather than in Driver so that stats stay an add-on to a
// driver that does not know about them.
var cgroupReaders sync.Map // DaemonHost() → *cgroupReader

// cgroups returns the reader for d's engine, or nil when the engine is not
// on this host (only a unix socket says it is).
func (d *Driver) cgroups() *cgroupReader {
	host := d.c.DaemonHost()
	if !strings.HasPrefix(host, "unix://") {
		return nil
	}
	if r, ok := cgroupReaders.Load(host); ok {
		return r.(*cgroupReader)
	}
	r, _ := cgroupReaders.LoadOrStore(host, newCgroupReader())
	return r.(*cgroupReader)
}

var errNoCgroup = errors.New("cgroup counters not readable from here")

// cgroupStats reads id's counters, or returns errNoCgroup when the engine
// must be asked instead.
func (d *Driver) cgroupStats(ctx context.Context, id string) (driver.Stats, error) {
	r := d.cgroups()
	if r == nil {
		return driver.Stats{}, errNoCgroup
	}
	r.mu.Lock()
	disabled := r.disabled
	box := r.boxes[id]
	r.mu.Unlock()
	if disabled {
		return driver.Stats{}, errNoCgroup
	}
	if box != nil {
		if st, err := r.read(box); err == nil {
			return st, nil
		}
		// Restarted (new pid) or gone: look it up again.
	}
	box, err := d.locate(ctx, r, id)
	if err != nil {
		return driver.Stats{}, err
	}
	st, err := r.read(box)
	if err != nil {
		r.mu.Lock()
		r.disabled = true
		r.mu.Unlock()
		return driver.Stats{}, fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	r.mu.Lock()
	r.forgetStale()
	r.boxes[id] = box
	r.mu.Unlock()
	return st, nil
}

// forgetStale drops boxes not read for a while (destroyed ones). r.mu held.
func (r *cgroupReader) forgetStale() {
	for id, b := range r.boxes {
		if time.Since(b.usedAt) > 10*time.Minute {
			delete(r.boxes, id)
		}
	}
}

// locate finds a running box's init pid through the engine and its cgroup
// dirs through /proc/<pid>/cgroup.
func (d *Driver) locate(ctx context.Context, r *cgroupReader, id string) (*cgroupBox, error) {
	name := ContainerName(id)
	res, err := d.c.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return nil, classify("inspect container "+name, err)
	}
	s := res.Container.State
	if s == nil || !s.Running || s.Pid <= 0 {
		return nil, fmt.Errorf("stats of container %s: it is not running: %w", name, errdefs.ErrConflict)
	}
	b, err := r.find(s.Pid)
	if err != nil {
		r.mu.Lock()
		r.disabled = true
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	if hc := res.Container.HostConfig; hc != nil {
		b.gvisor = d.isGVisor(hc.Runtime)
	}
	return b, nil
}

func (r *cgroupReader) find(pid int) (*cgroupBox, error) {
	self, err := os.ReadFile(filepath.Join(r.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, err
	}
	b := &cgroupBox{pid: pid, self: self}
	v1 := map[string]string{}
	var unified string
	for line := range strings.SplitSeq(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || strings.Contains(parts[2], "..") {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	switch {
	case v1["memory"] != "" && v1["cpuacct"] != "" && v1["pids"] != "":
		b.cpu = filepath.Join(r.root, "cpuacct", v1["cpuacct"])
		b.memory = filepath.Join(r.root, "memory", v1["memory"])
		b.pids = filepath.Join(r.root, "pids", v1["pids"])
	case unified != "" && len(v1) == 0:
		b.v2 = true
		dir := filepath.Join(r.root, unified)
		b.cpu, b.memory, b.pids = dir, dir, dir
	default:
		return nil, fmt.Errorf("pid %d: no cgroup layout this reader knows", pid)
	}
	if b.cpu == r.root || b.memory == r.root {
		// "/" means the box's cgroup is not visible from our namespace.
		return nil, fmt.Errorf("pid %d: its cgroup is the root of ours", pid)
	}
	return b, nil
}

// read reads every counter of b; it fails if b's pid now belongs to
// another cgroup (the box restarted, the pid was reused).
func (r *cgroupReader) read(b *cgroupBox) (driver.Stats, error) {
	self, err := os.ReadFile(filepath.Join(r.proc, strconv.Itoa(b.pid), "cgroup"))
	if err != nil || !bytes.Equal(self, b.self) {
		return driver.Stats{}, fmt.Errorf("pid %d moved or exited", b.pid)
	}
	var st driver.Stats
	var cpu, mem, inactive uint64
	var limit string
	if b.v2 {
		stat, err := readKeyed(filepath.Join(b.cpu, "cpu.stat"))
		if err != nil {
			return st, err
		}
		cpu = stat["usage_usec"] * 1000
		if mem, err = readUint(filepath.Join(b.memory, "memory.current")); err != nil {
			return st, err
		}
		ms, err := readKeyed(filepath.Join(b.memory, "memory.stat"))
		if err != nil {
			return st, err
		}
		inactive = ms["inactive_file"]
		limit = readString(filepath.Join(b.memory, "memory.max"))
	} else {
		if cpu, err = readUint(filepath.Join(b.cpu, "cpuacct.usage")); err != nil {
			return st, err
		}
		if mem, err = readUint(filepath.Join(b.memory, "memory.usage_in_bytes")); err != nil {
			return st, err
		}
		ms, err := readKeyed(filepath.Join(b.memory, "memory.stat"))
		if err != nil {
			return st, err
		}
		inactive = ms["total_inactive_file"]
		limit = readString(filepath.Join(b.memory, "memory.limit_in_bytes"))
	}
	st.Read = time.Now()
	st.CPUUsageNs = cpu
	if inactive < mem {
		mem -= inactive // the page cache the kernel would drop, as docker stats does
	}
	st.MemoryBytes = clampInt(mem)
	st.MemoryLimitBytes = r.limit(limit)
	pids, err := readUint(filepath.Join(b.pids, "pids.current"))
	if err != nil {
		return st, err
	}
	st.Pids = clampInt(pids)
	if v, err := strconv.ParseInt(readString(filepath.Join(b.pids, "pids.max")), 10, 64); err == nil {
		st.PidsLimit = v // "max" (unlimited) stays 0
	}
	if b.gvisor {
		st.Pids, st.PidsLimit, st.Unavailable = 0, 0, UnavailableGVisor
	}
	if st.NetRxBytes, st.NetTxBytes, err = readNetDev(filepath.Join(r.proc, strconv.Itoa(b.pid), "net", "dev")); err != nil {
		return st, err
	}
	r.mu.Lock()
	b.usedAt = st.Read
	r.mu.Unlock()
	return st, nil
}

// limit turns a cgroup memory limit into bytes, the host's memory when
// there is none ("max", or v1's page-rounded MaxInt64), as the engine does.
func (r *cgroupReader) limit(s string) int64 {
	r.mu.Lock()
	if r.memTotal == 0 {
		r.memTotal = hostMemTotal(r.proc)
	}
	total := r.memTotal
	r.mu.Unlock()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || (total > 0 && v > total) {
		return total
	}
	return v
}

func hostMemTotal(proc string) int64 {
	m, err := readKeyed(filepath.Join(proc, "meminfo"))
	if err != nil {
		return 0
	}
	return clampInt(m["MemTotal:"] * 1024)
}

func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readUint(p string) (uint64, error) {
	s := readString(p)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %q is not a counter", p, s)
	}
	return v, nil
}

// readKeyed reads "key value" lines (memory.stat, cpu.stat, meminfo).
func readKeyed(p string) (map[string]uint64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
			m[fields[0]] = v
		}
	}
	return m, sc.Err()
}

// readNetDev sums received and sent bytes over the interfaces of the
// network namespace /proc/<pid>/net/dev shows, loopback excluded (as the
// engine reports only the box's attached interfaces).
func readNetDev(p string) (rx, tx int64, err error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, err1 := strconv.ParseUint(f[0], 10, 64)
		t, err2 := strconv.ParseUint(f[8], 10, 64)
		if err1 != nil || err2 != nil {
			continue // the header lines
		}
		rx += clampInt(r)
		tx += clampInt(t)
	}
	return rx, tx, nil
}
