package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Terminal shapes of the API.
type (
	// TerminalOptions start a terminal: Command or Argv (neither: an
	// interactive shell), Env, Cwd, TTY (a PTY; else pipes with stdout and
	// stderr apart), Cols and Rows (default 80x24) and DetachTimeoutSec
	// (how long the session outlives a dropped client; default 300).
	TerminalOptions = wire.TerminalRequest
	TerminalInfo    = wire.TerminalInfo
	TerminalList    = wire.TerminalList
	TerminalMessage = wire.TerminalMessage
)

const (
	// terminalBuffer bounds the output a Terminal holds for its reader per
	// stream; beyond it the server is held back, not buffered for.
	terminalBuffer = 1 << 20
	// terminalChunk is the largest stdin message Write sends.
	terminalChunk = 32 << 10
	maxTermSize   = 1000
)

func terminalPath(id, sid, rest string) string {
	return sandboxPath(id, "/terminals/"+url.PathEscape(sid)+rest)
}

// CreateTerminal starts a terminal session without attaching to it.
func (c *Client) CreateTerminal(ctx context.Context, id string, opts TerminalOptions) (TerminalInfo, error) {
	var out TerminalInfo
	op := "create terminal in sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/terminals")}, opts, &out)
	return out, err
}

// ListTerminals lists a sandbox's terminal sessions, running or exited and
// still kept for a re-attach.
func (c *Client) ListTerminals(ctx context.Context, id string) ([]TerminalInfo, error) {
	var out TerminalList
	op := "list terminals in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/terminals")}, nil, &out)
	return out.Terminals, err
}

// GetTerminal describes one terminal session.
func (c *Client) GetTerminal(ctx context.Context, id, sessionID string) (TerminalInfo, error) {
	var out TerminalInfo
	op := fmt.Sprintf("get terminal %s in sandbox %s", sessionID, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: terminalPath(id, sessionID, "")}, nil, &out)
	return out, err
}

// KillTerminal kills a terminal session's processes and forgets it. It
// returns once they are gone; an attached Terminal gets the exit.
func (c *Client) KillTerminal(ctx context.Context, id, sessionID string) error {
	op := fmt.Sprintf("kill terminal %s in sandbox %s", sessionID, id)
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: terminalPath(id, sessionID, "")}, nil, nil)
}

// OpenTerminal starts a process with a PTY (opts.TTY) or pipes and attaches
// to it in one step (the interactive exec WebSocket). ctx bounds only the
// opening; end the terminal with Close or by letting the process exit.
func (c *Client) OpenTerminal(ctx context.Context, id string, opts TerminalOptions) (*Terminal, error) {
	op := "open terminal in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	return c.dialTerminal(ctx, op, sandboxPath(id, "/exec"), opts.Query())
}

// AttachTerminal attaches to an existing session, for example after the
// connection of an earlier Terminal dropped. The session's recent output
// (up to 256 KiB) is replayed first, then output continues live. Another
// client attached to the session is detached.
func (c *Client) AttachTerminal(ctx context.Context, id, sessionID string) (*Terminal, error) {
	op := fmt.Sprintf("attach terminal %s in sandbox %s", sessionID, id)
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	return c.dialTerminal(ctx, op, terminalPath(id, sessionID, "/attach"), nil)
}

func (c *Client) dialTerminal(ctx context.Context, op, path string, q url.Values) (*Terminal, error) {
	req, err := c.newRequest(ctx, request{op: op, method: http.MethodGet, path: path, query: q})
	if err != nil {
		return nil, err
	}
	t := &Terminal{
		op:     op,
		stdout: newTermBuffer(),
		stderr: newTermBuffer(),
		done:   make(chan struct{}),
	}
	idle := c.streamIdle
	ws, resp, err := websocket.Dial(ctx, req.URL.String(), &websocket.DialOptions{
		HTTPClient:      c.hc,
		HTTPHeader:      req.Header,
		CompressionMode: websocket.CompressionDisabled,
		OnPingReceived: func(context.Context, []byte) bool {
			t.touch(idle)
			return true
		},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("%s: %w", op, errdefs.Read(resp))
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// Server messages are chunks of at most a few tens of KiB.
	ws.SetReadLimit(4 << 20)
	t.ws = ws
	t.ctx, t.cancel = context.WithCancel(context.Background())
	typ, data, err := ws.Read(ctx)
	var ready wire.TerminalMessage
	if err == nil && (typ != websocket.MessageText || json.Unmarshal(data, &ready) != nil || ready.Type != wire.TerminalReady) {
		err = fmt.Errorf("first message is not ready: %.200s", data)
	}
	if err != nil {
		t.cancel()
		_ = ws.CloseNow()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	t.sid, t.tty = ready.SessionID, ready.TTY
	if idle > 0 {
		// The server pings every 15 s: silence this long means the
		// connection is dead, and Wait must not hang on it.
		t.idle = time.AfterFunc(idle, func() {
			t.mu.Lock()
			t.idleHit = true
			t.mu.Unlock()
			_ = ws.CloseNow()
		})
	}
	go t.readLoop()
	return t, nil
}

// Terminal is an attached terminal session. Read returns its output: the
// PTY's, or stdout in pipe mode, where Stderr returns stderr. Write sends
// stdin. The terminal ends with the process's exit, which Wait returns.
//
// Output waits in a bounded buffer (1 MiB per stream) until read; when
// that is full the server, and so the process, is held back. So read the
// output (both streams in pipe mode) while the process runs: a Wait with
// nobody reading a chatty process does not return. Read, Write and the
// control methods may be called from different goroutines.
type Terminal struct {
	op     string
	ws     *websocket.Conn
	sid    string
	tty    bool
	ctx    context.Context
	cancel context.CancelFunc
	idle   *time.Timer

	stdout, stderr *termBuffer
	done           chan struct{}

	mu      sync.Mutex
	idleHit bool
	exit    *ExitInfo
	err     error
	errs    []string

	closeOnce sync.Once
}

// SessionID is the session's id, for AttachTerminal and KillTerminal.
func (t *Terminal) SessionID() string { return t.sid }

// TTY reports whether the session has a PTY (else pipes).
func (t *Terminal) TTY() bool { return t.tty }

// Read reads output: the PTY's, or stdout in pipe mode. It returns io.EOF
// after the exit, or the error that ended the connection.
func (t *Terminal) Read(p []byte) (int, error) { return t.stdout.Read(p) }

// Stderr is the stderr of a pipe-mode session; with a PTY it has nothing
// (the PTY merges the streams) and ends with Read.
func (t *Terminal) Stderr() *TerminalStream { return &TerminalStream{t.stderr} }

// TerminalStream is one output stream of a Terminal.
type TerminalStream struct{ b *termBuffer }

func (s *TerminalStream) Read(p []byte) (int, error) { return s.b.Read(p) }

// Write sends p to the process's stdin.
func (t *Terminal) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), terminalChunk)]
		if err := t.ws.Write(t.ctx, websocket.MessageBinary, c); err != nil {
			return n, fmt.Errorf("terminal %s: write stdin: %w", t.sid, t.explain(err))
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// Resize sets the PTY's size (1-1000 each); the process gets SIGWINCH.
func (t *Terminal) Resize(cols, rows int) error {
	if cols < 1 || cols > maxTermSize || rows < 1 || rows > maxTermSize {
		return fmt.Errorf("terminal %s: resize to %dx%d: cols and rows must be between 1 and %d: %w", t.sid, cols, rows, maxTermSize, ErrInvalidArgument)
	}
	return t.control(wire.TerminalMessage{Type: wire.TerminalResize, Cols: cols, Rows: rows})
}

// Signal sends a signal ("SIGINT", "INT" or "2"): with a PTY to the
// terminal's foreground process group, as a keyboard would; else to the
// session's process group. A signal the server does not know is reported
// through Errors.
func (t *Terminal) Signal(sig string) error {
	return t.control(wire.TerminalMessage{Type: wire.TerminalSignal, Signal: sig})
}

// CloseStdin ends the process's input: the pipe is closed, or with a PTY
// the EOF character (^D) is sent.
func (t *Terminal) CloseStdin() error {
	return t.control(wire.TerminalMessage{Type: wire.TerminalStdinEOF})
}

func (t *Terminal) control(m wire.TerminalMessage) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := t.ws.Write(t.ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("terminal %s: %s: %w", t.sid, m.Type, t.explain(err))
	}
	return nil
}

// Errors returns the error messages the server sent so far: control
// messages it could not carry out (the session went on).
func (t *Terminal) Errors() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.errs...)
}

// Wait waits for the process to exit and returns how. An error means the
// connection ended first (the session may still run: AttachTerminal).
func (t *Terminal) Wait() (ExitInfo, error) {
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit != nil {
		return *t.exit, nil
	}
	return ExitInfo{}, t.err
}

// Close drops the connection. The session goes on in the sandbox for its
// detach timeout; KillTerminal ends it.
func (t *Terminal) Close() error {
	t.closeOnce.Do(func() {
		t.cancel()
		_ = t.ws.CloseNow()
		t.stdout.abandon()
		t.stderr.abandon()
		if t.idle != nil {
			t.idle.Stop()
		}
	})
	<-t.done
	return nil
}

func (t *Terminal) touch(d time.Duration) {
	if t.idle != nil && d > 0 {
		t.idle.Reset(d)
	}
}

func (t *Terminal) explain(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idleHit {
		return fmt.Errorf("no message or ping from the server for too long: %w", err)
	}
	return err
}

// readLoop moves server messages into the output buffers until the exit
// and the close after it, or the connection's end.
func (t *Terminal) readLoop() {
	defer close(t.done)
	var err error
	for {
		var typ websocket.MessageType
		var data []byte
		typ, data, err = t.ws.Read(t.ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			t.deliver(data)
			continue
		}
		var m wire.TerminalMessage
		if json.Unmarshal(data, &m) != nil {
			continue // a newer server's message this client does not know
		}
		switch m.Type {
		case wire.TerminalExit:
			ex := ExitInfo{Signal: m.Signal}
			if m.ExitCode != nil {
				ex.ExitCode = *m.ExitCode
			}
			t.mu.Lock()
			t.exit = &ex
			t.mu.Unlock()
		case wire.TerminalError:
			t.mu.Lock()
			t.errs = append(t.errs, m.Message)
			t.mu.Unlock()
		}
	}
	if t.idle != nil {
		t.idle.Stop()
	}
	t.mu.Lock()
	gotExit := t.exit != nil
	if !gotExit {
		switch {
		case websocket.CloseStatus(err) != -1:
			t.err = fmt.Errorf("terminal %s: closed by the server before the exit: %w", t.sid, err)
		case t.ctx.Err() != nil:
			t.err = fmt.Errorf("terminal %s: closed: %w", t.sid, net.ErrClosed)
		default:
			t.err = fmt.Errorf("terminal %s: connection lost before the exit: %w", t.sid, err)
		}
		if t.idleHit {
			t.err = fmt.Errorf("terminal %s: no message or ping from the server for too long: %w", t.sid, err)
		}
	}
	readErr := t.err
	t.mu.Unlock()
	if gotExit {
		readErr = nil
	}
	t.stdout.finish(readErr)
	t.stderr.finish(readErr)
	t.cancel()
	_ = t.ws.CloseNow()
}

func (t *Terminal) deliver(data []byte) {
	if t.tty {
		t.stdout.write(data)
		return
	}
	if len(data) == 0 {
		return
	}
	switch data[0] {
	case wire.TerminalStdout:
		t.stdout.write(data[1:])
	case wire.TerminalStderr:
		t.stderr.write(data[1:])
	}
}

// termBuffer holds one output stream between the read loop and the
// user's Reads, up to terminalBuffer bytes; the read loop waits for room.
type termBuffer struct {
	mu        sync.Mutex
	cond      *sync.Cond
	buf       []byte
	done      bool
	err       error // after done: nil means io.EOF
	abandoned bool  // nobody will read: writes are dropped
}

func newTermBuffer() *termBuffer {
	b := &termBuffer{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *termBuffer) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.buf) >= terminalBuffer && !b.abandoned {
		b.cond.Wait()
	}
	if !b.abandoned {
		b.buf = append(b.buf, p...)
		b.cond.Broadcast()
	}
}

func (b *termBuffer) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.buf) == 0 && !b.done && !b.abandoned {
		b.cond.Wait()
	}
	if len(b.buf) > 0 {
		n := copy(p, b.buf)
		b.buf = b.buf[n:]
		if len(b.buf) == 0 {
			b.buf = nil // let a large buffer go
		}
		b.cond.Broadcast()
		return n, nil
	}
	if b.abandoned {
		return 0, net.ErrClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	return 0, io.EOF
}

func (b *termBuffer) finish(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.err = true, err
	b.cond.Broadcast()
}

func (b *termBuffer) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.abandoned = true
	b.buf = nil
	b.cond.Broadcast()
}
