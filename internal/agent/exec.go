package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/ndjson"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	pipeDrainGrace      = 200 * time.Millisecond
	streamWriteDeadline = 2 * time.Minute
	defaultPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// execSpec is a validated ExecRequest.
type execSpec struct {
	shell   bool // run command by the shell
	argv    []string
	env     map[string]string
	cwd     string
	stdin   string
	timeout time.Duration
	maxOut  int64
}

// parseExec validates req at the edge with the command spec the api uses
// too. It checks syntax only; whether cwd exists is checked when the
// process starts.
func parseExec(workspace string, req wire.ExecRequest) (execSpec, error) {
	if err := cmdspec.Exec(&req, cmdspec.Defaults{Workspace: workspace}); err != nil {
		return execSpec{}, err
	}
	s := execSpec{
		argv:    req.Argv,
		env:     req.Env,
		cwd:     req.Cwd,
		stdin:   req.Stdin,
		timeout: time.Duration(req.TimeoutMs) * time.Millisecond,
		maxOut:  req.MaxOutputBytes,
	}
	if req.Command != "" {
		s.shell, s.argv = true, []string{req.Command}
	}
	if s.cwd == "" {
		s.cwd = workspace
	}
	return s, nil
}

// mergeEnv lays extra over base; later entries win, order is stable.
func mergeEnv(base []string, extra map[string]string) []string {
	env := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; over {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

func envValue(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// lookPath finds name in pathList as a shell would, for the request's PATH
// rather than the agent's own.
func lookPath(name, pathList string) (string, bool) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// process is a started child with the parent ends of its pipes.
type process struct {
	pid            int
	exited         <-chan ExitStatus
	stdin          *os.File
	stdout, stderr *os.File
	start          time.Time
}

// startFailure is a program that could not be run; it is reported as a
// shell would (exit 126/127 and a message on stderr), not as an HTTP error.
type startFailure struct {
	code int
	msg  string
}

// startProcess starts spec. It returns a startFailure when the program is
// missing or not executable, and an error for everything the caller got wrong
// (cwd) or that broke in the agent.
func (h *handler) startProcess(spec execSpec) (*process, *startFailure, error) {
	fi, err := os.Stat(spec.cwd)
	if err != nil {
		return nil, nil, errdefs.Invalid("cwd", "%s: %v", spec.cwd, unwrapPathErr(err))
	}
	if !fi.IsDir() {
		return nil, nil, errdefs.Invalid("cwd", "%s is not a directory", spec.cwd)
	}
	env := mergeEnv(h.baseEnv(), spec.env)
	var prog string
	var argv []string
	if spec.shell {
		prog = h.opts.Shell
		argv = []string{prog, "-c", spec.argv[0]}
	} else {
		prog = spec.argv[0]
		argv = spec.argv
		if !strings.Contains(prog, "/") {
			pathList, ok := envValue(env, "PATH")
			if !ok {
				pathList = defaultPath
			}
			found, ok := lookPath(prog, pathList)
			if !ok {
				return nil, &startFailure{127, fmt.Sprintf("hotcell-agent: %s: command not found in PATH (%s)\n", prog, pathList)}, nil
			}
			prog = found
		} else if !filepath.IsAbs(prog) {
			// The child chdirs before exec; resolve here too so the
			// missing-file check below looks where the exec will.
			prog = filepath.Join(spec.cwd, prog)
		}
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("exec: create stdin pipe: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return nil, nil, fmt.Errorf("exec: create stdout pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		return nil, nil, fmt.Errorf("exec: create stderr pipe: %w", err)
	}
	attr := &syscall.ProcAttr{
		Dir:   spec.cwd,
		Env:   env,
		Files: []uintptr{stdinR.Fd(), stdoutW.Fd(), stderrW.Fd()},
	}
	start := time.Now()
	pid, exited, err := h.reaper.Start(prog, argv, attr)
	// The child has its copies; ours would keep the pipes open forever.
	closeAll(stdinR, stdoutW, stderrW)
	if err != nil {
		closeAll(stdinW, stdoutR, stderrR)
		if f := describeExecError(spec, prog, err); f != nil {
			return nil, f, nil
		}
		return nil, nil, fmt.Errorf("exec %s: %w", prog, err)
	}
	return &process{pid: pid, exited: exited, stdin: stdinW, stdout: stdoutR, stderr: stderrR, start: start}, nil, nil
}

func describeExecError(spec execSpec, prog string, err error) *startFailure {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return nil
	}
	switch errno {
	case syscall.ENOENT:
		if spec.shell {
			return &startFailure{127, fmt.Sprintf("hotcell-agent: %s: not found: this image has no shell to run command; pass argv instead\n", prog)}
		}
		if _, statErr := os.Stat(prog); statErr == nil {
			return &startFailure{127, fmt.Sprintf("hotcell-agent: %s: its interpreter or dynamic loader was not found\n", prog)}
		}
		return &startFailure{127, fmt.Sprintf("hotcell-agent: %s: no such file or directory\n", prog)}
	case syscall.EACCES, syscall.EPERM:
		return &startFailure{126, fmt.Sprintf("hotcell-agent: %s: permission denied\n", prog)}
	case syscall.ENOEXEC:
		return &startFailure{126, fmt.Sprintf("hotcell-agent: %s: exec format error\n", prog)}
	case syscall.EISDIR, syscall.ENOTDIR:
		return &startFailure{126, fmt.Sprintf("hotcell-agent: %s: %v\n", prog, errno)}
	}
	return nil
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// outcome is how a run ended.
type outcome struct {
	status   ExitStatus
	timedOut bool
	duration time.Duration
}

type chunk struct {
	typ  string
	data []byte
	ack  chan struct{}
}

// run drives p until it has exited and its pipes are drained. emit gets every
// output chunk in order, on the calling goroutine; the chunk's bytes are only
// valid during the call. When emit fails or ctx ends, the process group is
// killed; run still waits for the exit so nothing is left behind.
func (p *process) run(ctx context.Context, timeout time.Duration, emit func(typ string, data []byte) error) outcome {
	chunks := make(chan chunk)
	readersDone := make(chan struct{}, 2)
	go readPipe(wire.EventStdout, p.stdout, chunks, readersDone)
	go readPipe(wire.EventStderr, p.stderr, chunks, readersDone)

	var o outcome
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
	}
	var emitErr error
	exited := p.exited
	gotExit := false
	readers := 2
	var grace <-chan time.Time
	ctxDone := ctx.Done()
	for !gotExit || readers > 0 {
		select {
		case c := <-chunks:
			if emitErr == nil {
				if emitErr = emit(c.typ, c.data); emitErr != nil {
					kill()
				}
			}
			c.ack <- struct{}{}
		case <-readersDone:
			readers--
		case st := <-exited:
			o.status, gotExit, exited = st, true, nil
			o.duration = time.Since(p.start)
			// Background grandchildren may hold the pipes open; don't
			// wait for them forever.
			grace = time.After(pipeDrainGrace)
		case <-grace:
			grace = nil
			closeAll(p.stdout, p.stderr)
		case <-timer.C:
			o.timedOut = true
			kill()
		case <-ctxDone:
			ctxDone = nil
			if emitErr == nil {
				emitErr = ctx.Err()
			}
			kill()
		}
	}
	if o.timedOut {
		// The leader is gone; its group may not be.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	// Closing stdin also ends a feedStdin write the child never read.
	closeAll(p.stdin, p.stdout, p.stderr)
	return o
}

func readPipe(typ string, f *os.File, chunks chan<- chunk, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	bp := getBuf()
	defer putBuf(bp)
	buf := *bp
	ack := make(chan struct{}, 1)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			chunks <- chunk{typ: typ, data: buf[:n], ack: ack}
			<-ack
		}
		if err != nil {
			return
		}
	}
}

// cappedBuffer keeps the first max bytes written and counts the rest.
type cappedBuffer struct {
	buf       bytes.Buffer
	max       int64
	truncated bool
}

func (b *cappedBuffer) write(p []byte) {
	room := b.max - int64(b.buf.Len())
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		b.truncated = true
	}
	b.buf.Write(p)
}

func (h *handler) exec(w http.ResponseWriter, r *http.Request) error {
	stream, err := queryBool(r.URL.Query(), "stream")
	if err != nil {
		return err
	}
	var req wire.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	spec, err := parseExec(h.workspace, req)
	if err != nil {
		return err
	}
	p, failure, err := h.startProcess(spec)
	if err != nil {
		return err
	}
	if stream {
		return h.execStream(w, r, spec, p, failure)
	}
	if failure != nil {
		return writeJSON(w, http.StatusOK, wire.ExecResult{Stderr: failure.msg, ExitCode: failure.code})
	}
	p.feedStdin(spec.stdin)
	stdout := &cappedBuffer{max: spec.maxOut}
	stderr := &cappedBuffer{max: spec.maxOut}
	o := p.run(r.Context(), spec.timeout, func(typ string, data []byte) error {
		if typ == wire.EventStdout {
			stdout.write(data)
		} else {
			stderr.write(data)
		}
		return nil
	})
	if r.Context().Err() != nil {
		return nil // nobody is listening
	}
	return writeJSON(w, http.StatusOK, wire.ExecResult{
		Stdout:     stdout.buf.String(),
		Stderr:     stderr.buf.String(),
		ExitCode:   o.status.Code,
		Signal:     o.status.SignalName(),
		DurationMs: o.duration.Milliseconds(),
		TimedOut:   o.timedOut,
		Truncated:  stdout.truncated || stderr.truncated,
	})
}

// feedStdin writes data to the child's stdin and closes it, without
// blocking the caller on a child that does not read.
func (p *process) feedStdin(data string) {
	if data == "" {
		_ = p.stdin.Close()
		return
	}
	go func() {
		_, _ = io.WriteString(p.stdin, data)
		_ = p.stdin.Close()
	}()
}

func (h *handler) execStream(w http.ResponseWriter, r *http.Request, spec execSpec, p *process, failure *startFailure) error {
	// A deadline per line bounds a stalled reader without limiting a slow
	// but live one; backpressure still reaches the child.
	s := ndjson.Start(w, r, ndjson.Options{
		WriteTimeout:   streamWriteDeadline,
		Keepalive:      h.opts.Keepalive,
		KeepaliveEvent: func() any { return wire.ExecEvent{Type: wire.EventKeepalive} },
		RequestID:      r.Header.Get("X-Request-Id"),
	})
	defer s.Close()
	if failure != nil {
		if s.Send(wire.ExecEvent{Type: wire.EventStderr, Data: []byte(failure.msg)}) == nil {
			_ = s.End(wire.ExecEvent{Type: wire.EventExit, ExitCode: failure.code})
		}
		return nil
	}
	p.feedStdin(spec.stdin)
	// The stream's context ends when the client leaves or a write fails:
	// either way the command is killed.
	o := p.run(s.Context(), spec.timeout, func(typ string, data []byte) error {
		return s.Send(wire.ExecEvent{Type: typ, Data: data})
	})
	if s.Context().Err() != nil {
		return nil
	}
	_ = s.End(wire.ExecEvent{
		Type:       wire.EventExit,
		ExitCode:   o.status.Code,
		Signal:     o.status.SignalName(),
		DurationMs: o.duration.Milliseconds(),
		TimedOut:   o.timedOut,
	})
	return nil
}
