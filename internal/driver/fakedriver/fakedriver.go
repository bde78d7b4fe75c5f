// Package fakedriver is an in-memory driver for unit tests of the code
// above the driver (the sandbox manager). Its boxes run a real agent in the
// test's process, which dials the box's run dir socket as a sandbox's agent
// does; commands it runs run on the host, so tests keep them harmless. It
// passes the driver conformance suite (drivertest) like a real driver, so a
// test that passes against it assumes nothing a real driver does not give.
package fakedriver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agent"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Pauser         = (*Driver)(nil)
	_ driver.InstanceLister = (*Driver)(nil)
	_ driver.EventWatcher   = (*Driver)(nil)
	_ driver.Statter        = (*Driver)(nil)
)

// Driver is the fake backend. It is safe for concurrent use.
type Driver struct {
	t testing.TB

	mu       sync.Mutex
	boxes    map[string]*box
	down     bool
	watchers map[*watcher]struct{}
	// runtimes are those Info reports and Create accepts; nil is every
	// runtime hotcell knows.
	runtimes []string
}

type box struct {
	spec   driver.Spec
	state  driver.BoxState
	cancel context.CancelFunc // the running agent's
	done   chan struct{}      // closed when the running agent returned
	oom    bool
	exit   int
}

type watcher struct {
	instance string
	ch       chan driver.BoxEvent
}

// New returns a fake driver whose boxes' agents have temp dirs of t as
// their workspaces; they stop when t ends.
func New(t testing.TB) *Driver {
	d := &Driver{t: t, boxes: map[string]*box{}, watchers: map[*watcher]struct{}{}}
	t.Cleanup(func() {
		d.mu.Lock()
		ids := make([]string, 0, len(d.boxes))
		for id := range d.boxes {
			ids = append(ids, id)
		}
		d.mu.Unlock()
		for _, id := range ids {
			d.Kill(id, false)
		}
	})
	return d
}

// SetDown makes Info fail as an engine that does not answer does.
func (d *Driver) SetDown(down bool) {
	d.mu.Lock()
	d.down = down
	d.mu.Unlock()
}

// Len returns how many boxes exist.
func (d *Driver) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.boxes)
}

// Kill stops a box as if behind the daemon's back (oom: killed for memory),
// with exit code 137 and a die (and oom) event.
func (d *Driver) Kill(id string, oom bool) { d.stop(id, oom, 137) }

func (d *Driver) stop(id string, oom bool, exit int) {
	d.mu.Lock()
	b, ok := d.boxes[id]
	if !ok {
		d.mu.Unlock()
		return
	}
	wasUp := b.state != driver.BoxStopped
	cancel, done := b.cancel, b.done
	b.cancel, b.done = nil, nil
	b.state, b.oom = driver.BoxStopped, oom
	if wasUp {
		b.exit = exit
		if oom {
			d.emitLocked(b, "oom")
		}
		d.emitLocked(b, "die")
	}
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (d *Driver) emitLocked(b *box, typ string) {
	for w := range d.watchers {
		if w.instance == b.spec.Instance {
			select {
			case w.ch <- driver.BoxEvent{ID: b.spec.ID, Type: typ}:
			default: // a watcher that does not keep up loses events, as from an engine
			}
		}
	}
}

func notFound(op, id string) error {
	return fmt.Errorf("%s box %s: %w", op, id, errdefs.ErrNotFound)
}

// SetRuntimes sets the runtimes the fake can run (wire.Runtime* names);
// the others are refused, as by an engine that lacks them. Its boxes all
// run the same way whatever their runtime.
func (d *Driver) SetRuntimes(rts ...string) {
	d.mu.Lock()
	d.runtimes = slices.Clone(rts)
	d.mu.Unlock()
}

func (d *Driver) runtimesLocked() []string {
	if d.runtimes == nil {
		return wire.Runtimes()
	}
	return d.runtimes
}

// Info describes the fake; it fails while the fake is down.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return driver.Info{}, fmt.Errorf("fake engine is down: %w", errdefs.ErrUnavailable)
	}
	info := driver.Info{Name: "fake", Runtimes: slices.Clone(d.runtimesLocked()), RuntimeHints: map[string]string{}}
	for _, rt := range wire.Runtimes() {
		if !slices.Contains(info.Runtimes, rt) {
			info.RuntimeHints[rt] = "the fake driver was told not to have it (SetRuntimes)"
		}
	}
	return info, nil
}

// MissingImagePrefix starts the references of images the fake does not
// have; it knows every other.
const MissingImagePrefix = "missing.invalid/"

// EnsureImage knows every image but those under MissingImagePrefix.
func (d *Driver) EnsureImage(ctx context.Context, ref string, _ driver.Progress) error {
	if strings.HasPrefix(ref, MissingImagePrefix) {
		return fmt.Errorf("image %s: the fake driver has no such image: %w", ref, errdefs.ErrNotFound)
	}
	return nil
}

// Create records a stopped box; an id in use is ErrAlreadyExists.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	if spec.ID == "" {
		return errdefs.Invalid("id", "is empty")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if spec.Runtime != "" && !slices.Contains(d.runtimesLocked(), spec.Runtime) {
		return errdefs.Invalid("runtime", "the fake driver cannot run %q (SetRuntimes)", spec.Runtime)
	}
	if _, ok := d.boxes[spec.ID]; ok {
		return fmt.Errorf("create box %s: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	if spec.Runtime == "" {
		spec.Runtime = wire.RuntimeRunc
	}
	if spec.AgentDial != nil {
		// In the run dir, as the Docker driver delivers it.
		data, err := spec.AgentDial.Marshal()
		if err == nil {
			err = os.WriteFile(filepath.Join(spec.HostRunDir, driver.AgentDialFile), data, 0o600)
		}
		if err != nil {
			return fmt.Errorf("create box %s: write the agent dial file: %w", spec.ID, err)
		}
	}
	d.boxes[spec.ID] = &box{spec: spec, state: driver.BoxStopped}
	return nil
}

// Start runs the box's agent; starting a running box is not an error.
func (d *Driver) Start(ctx context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[id]
	if !ok {
		return notFound("start", id)
	}
	if b.state != driver.BoxStopped {
		return nil
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.cancel, b.done, b.state, b.oom, b.exit = cancel, done, driver.BoxRunning, false, 0
	sock := filepath.Join(b.spec.HostRunDir, driver.AgentSocket)
	// As cmd/hotcell-agent dials: the TCP channel when the run dir has
	// a dial file (Create wrote it), else the socket.
	dial := agent.FileDialer(filepath.Join(b.spec.HostRunDir, driver.AgentDialFile), sock, slog.New(slog.DiscardHandler))
	h := agent.NewHandler(agent.Options{Workspace: d.t.TempDir()})
	go func() {
		defer close(done)
		_ = agent.RunDialer(actx, dial, h, slog.New(slog.DiscardHandler))
	}()
	return nil
}

// Stop stops the box's agent; stopping a stopped box is not an error.
func (d *Driver) Stop(ctx context.Context, id string, _ time.Duration) error {
	d.mu.Lock()
	_, ok := d.boxes[id]
	d.mu.Unlock()
	if !ok {
		return notFound("stop", id)
	}
	d.stop(id, false, 0) // the agent exits on SIGTERM
	return nil
}

// Destroy removes the box; a missing one is not an error.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	d.Kill(id, false)
	d.mu.Lock()
	delete(d.boxes, id)
	d.mu.Unlock()
	return nil
}

// Inspect reports the box; a missing one is BoxMissing.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[id]
	if !ok {
		return driver.Status{ID: id, State: driver.BoxMissing}, nil
	}
	return driver.Status{ID: id, State: b.state, OOMKilled: b.oom, ExitCode: b.exit, Runtime: b.spec.Runtime}, nil
}

// List reports every box, sorted by id.
func (d *Driver) List(ctx context.Context) ([]driver.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]driver.Status, 0, len(d.boxes))
	for id, b := range d.boxes {
		out = append(out, driver.Status{ID: id, State: b.state})
	}
	slices.SortFunc(out, func(a, b driver.Status) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Pause freezes a running box (its agent keeps running: the fake has no
// freezer); pausing a paused box is not an error.
func (d *Driver) Pause(ctx context.Context, id string) error {
	return d.setPaused(id, true)
}

// Unpause thaws a paused box; unpausing a running box is not an error.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	return d.setPaused(id, false)
}

func (d *Driver) setPaused(id string, paused bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	op := map[bool]string{true: "pause", false: "unpause"}[paused]
	b, ok := d.boxes[id]
	if !ok {
		return notFound(op, id)
	}
	if b.state == driver.BoxStopped {
		return fmt.Errorf("%s box %s: it is not running: %w", op, id, errdefs.ErrConflict)
	}
	b.state = driver.BoxRunning
	if paused {
		b.state = driver.BoxPaused
	}
	return nil
}

// Stats reports a running or paused box as one process (its agent) with no
// CPU, memory or network use.
func (d *Driver) Stats(ctx context.Context, id string) (driver.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[id]
	if !ok {
		return driver.Stats{}, notFound("stats of", id)
	}
	if b.state == driver.BoxStopped {
		return driver.Stats{}, fmt.Errorf("stats of box %s: it is not running: %w", id, errdefs.ErrConflict)
	}
	return driver.Stats{Read: time.Now(), Pids: 1}, nil
}

// ListOwned returns the ids of instance's boxes, sorted.
func (d *Driver) ListOwned(ctx context.Context, instance string) ([]string, error) {
	if instance == "" {
		return nil, fmt.Errorf("list owned boxes: instance is empty")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id, b := range d.boxes {
		if b.spec.Instance == instance {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// WatchEvents reports the die and oom events of instance's boxes until ctx
// ends.
func (d *Driver) WatchEvents(ctx context.Context, instance string, fn func(driver.BoxEvent)) error {
	w := &watcher{instance: instance, ch: make(chan driver.BoxEvent, 64)}
	d.mu.Lock()
	d.watchers[w] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.watchers, w)
		d.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-w.ch:
			fn(ev)
		}
	}
}
