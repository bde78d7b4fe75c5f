package e2b

// envd's process.Process service (e2b-protocol.md §4, §7) on the agent's
// process streams (internal/agent/terminal_stream.go): every E2B process is
// an agent terminal session, with pipes (commands) or a PTY (pty.create).
// The session belongs to the agent, so a background command outlives this
// daemon, and Connect finds it again by pid after a restart.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	// defaultUser is who runs a process when the SDK names nobody (envd
	// 0.4.0 and later send no user): E2B's default user, if the image has it,
	// else the agent's own (root).
	defaultUser = "user"
	// processDetach is how long an E2B process outlives its last stream:
	// as long as the agent allows. E2B's processes live until they end or
	// their Connect-Timeout-Ms runs out, whoever watches.
	processDetach = 24 * time.Hour
	// maxFrame bounds one frame read from the agent (it sends at most
	// 32 KiB of output at once).
	maxFrame = 1 << 20
)

// processRoutes registers envd's process.Process service (e2b-protocol.md §4, §7).
func (s *Server) processRoutes() {
	s.envd("POST /process.Process/Start", serverStream(s.processStart))
	s.envd("POST /process.Process/Connect", serverStream(s.processConnect))
	s.envd("POST /process.Process/List", unary(s.processList))
	s.envd("POST /process.Process/SendInput", unary(s.processSendInput))
	s.envd("POST /process.Process/SendSignal", unary(s.processSendSignal))
	s.envd("POST /process.Process/Update", unary(s.processUpdate))
	s.envd("POST /process.Process/CloseStdin", unary(s.processCloseStdin))
	s.envd("POST /process.Process/StreamInput", func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("StreamInput is not served (the SDK sends input with SendInput): %w", errdefs.ErrNotImplemented)
	})
}

// The messages, in proto3 JSON (infra:packages/envd/spec/process/process.proto).

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type ptySize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

type ptyConfig struct {
	Size *ptySize `json:"size,omitempty"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	PTY     *ptyConfig    `json:"pty,omitempty"`
	Tag     *string       `json:"tag,omitempty"`
	Stdin   *bool         `json:"stdin,omitempty"`
}

// processSelector is a oneof: pid or tag.
type processSelector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type connectRequest struct {
	Process processSelector `json:"process"`
}

type processInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

type sendInputRequest struct {
	Process processSelector `json:"process"`
	Input   *processInput   `json:"input,omitempty"`
}

type sendSignalRequest struct {
	Process processSelector `json:"process"`
	Signal  json.RawMessage `json:"signal,omitempty"`
}

type updateRequest struct {
	Process processSelector `json:"process"`
	PTY     *ptyConfig      `json:"pty,omitempty"`
}

type closeStdinRequest struct {
	Process processSelector `json:"process"`
}

type empty struct{}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *empty      `json:"keepalive,omitempty"`
}

// eventMessage is StartResponse and ConnectResponse.
type eventMessage struct {
	Event processEvent `json:"event"`
}

// requestUser is the user a Start names in Authorization: Basic
// base64("<user>:"), and whether it named one.
func requestUser(r *http.Request) (string, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false, nil
	}
	name, _, ok := r.BasicAuth()
	if !ok || name == "" {
		return "", false, errdefs.Invalid("Authorization", "want Basic base64(\"<user>:\")")
	}
	return name, true, nil
}

// toStreamRequest maps a StartRequest to the agent's process stream.
func toStreamRequest(r *http.Request, req *startRequest) (wire.ProcessStreamRequest, error) {
	var out wire.ProcessStreamRequest
	if req.Process.Cmd == "" {
		return out, errdefs.Invalid("process.cmd", "is empty")
	}
	if req.Tag != nil {
		return out, fmt.Errorf("process tags are not supported (select processes by pid): %w", errdefs.ErrNotImplemented)
	}
	out.Argv = append([]string{req.Process.Cmd}, req.Process.Args...)
	out.Env = req.Process.Envs
	if req.Process.Cwd != nil {
		out.Cwd = *req.Process.Cwd
	}
	if req.PTY != nil {
		out.TTY = true
		if sz := req.PTY.Size; sz != nil {
			if sz.Cols > 1000 || sz.Rows > 1000 {
				return out, errdefs.Invalid("pty.size", "cols and rows must be at most 1000, got %dx%d", sz.Cols, sz.Rows)
			}
			out.Cols, out.Rows = int(sz.Cols), int(sz.Rows)
		}
	} else {
		out.Stdin = req.Stdin != nil && *req.Stdin
	}
	user, named, err := requestUser(r)
	if err != nil {
		return out, err
	}
	if named {
		out.User = user
	} else {
		out.User, out.UserOptional = defaultUser, true
	}
	if d, ok := ConnectTimeout(r); ok {
		// envd's reading of the header: the process's lifetime.
		out.TimeoutMs = min(d, processDetach).Milliseconds()
	}
	out.DetachTimeoutSec = int(processDetach / time.Second)
	return out, nil
}

func (s *Server) processStart(r *http.Request, req *startRequest, st *Stream) error {
	sreq, err := toStreamRequest(r, req)
	if err != nil {
		return err
	}
	conn, err := s.opts.Sandboxes.Agent(r.Context(), SandboxID(r))
	if err != nil {
		return err
	}
	body, err := json.Marshal(sreq)
	if err != nil {
		return err
	}
	return s.relay(r, st, conn, http.MethodPost, "/v1/terminals/stream", body)
}

func (s *Server) processConnect(r *http.Request, req *connectRequest, st *Stream) error {
	pid, err := selectedPID(req.Process)
	if err != nil {
		return err
	}
	conn, err := s.opts.Sandboxes.Agent(r.Context(), SandboxID(r))
	if err != nil {
		return err
	}
	return s.relay(r, st, conn, http.MethodGet, "/v1/terminals/"+pid+"/stream", nil)
}

// relay turns the agent's process stream into E2B's: start, data and
// keepalives, end. It returns once the process ended (and the caller ends
// the stream at once: run() resolves only when the stream closes).
func (s *Server) relay(r *http.Request, st *Stream, conn *agentconn.Conn, method, path string, body []byte) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	areq, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		areq.Header.Set("Content-Type", "application/json")
	}
	resp, err := conn.Send(areq)
	if err != nil {
		return agentError(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	typ, p, err := wire.ReadTerminalFrame(br, maxFrame)
	if err != nil {
		return fmt.Errorf("read the agent's process stream: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	var info wire.TerminalInfo
	if typ != wire.TerminalFrameReady || json.Unmarshal(p, &info) != nil || info.PID < 0 || info.PID > 1<<31 {
		return fmt.Errorf("the agent's process stream did not start with its process: %w", errdefs.ErrUnavailable)
	}
	if err := st.Send(eventMessage{Event: processEvent{Start: &startEvent{PID: uint32(info.PID)}}}); err != nil {
		return err
	}
	st.Keepalive(ctx, KeepaliveInterval(r), eventMessage{Event: processEvent{Keepalive: &empty{}}})
	for {
		typ, p, err := wire.ReadTerminalFrame(br, maxFrame)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the agent's process stream ended before the process: %w", errors.Join(errdefs.ErrUnavailable, err))
		}
		var ev processEvent
		switch typ {
		case wire.TerminalFrameStdout:
			ev.Data = &dataEvent{Stdout: p}
		case wire.TerminalFrameStderr:
			ev.Data = &dataEvent{Stderr: p}
		case wire.TerminalFramePTY:
			ev.Data = &dataEvent{PTY: p}
		case wire.TerminalFrameExit:
			var m wire.TerminalMessage
			if err := json.Unmarshal(p, &m); err != nil {
				return fmt.Errorf("the agent's exit frame: %w", errors.Join(errdefs.ErrUnavailable, err))
			}
			return st.Send(eventMessage{Event: processEvent{End: endOf(m)}})
		default:
			continue // keepalives: ours go out on their own schedule
		}
		if err := st.Send(eventMessage{Event: ev}); err != nil {
			return err
		}
	}
}

// endOf is the end event of an exit, as envd words it from Go's
// os.ProcessState: a signalled process did not exit (exited false, exit
// code -1, status "signal: killed").
func endOf(m wire.TerminalMessage) *endEvent {
	if m.Signal != "" {
		status := "signal: " + signalText(m.Signal)
		return &endEvent{ExitCode: -1, Status: status, Error: &status}
	}
	code := 0
	if m.ExitCode != nil {
		code = *m.ExitCode
	}
	status := "exit status " + strconv.Itoa(code)
	end := &endEvent{ExitCode: int32(code), Exited: true, Status: status}
	if code != 0 {
		end.Error = &status
	}
	return end
}

// signalText is Go's description of the common signals (syscall.Signal's
// String), which is what envd's status carries.
func signalText(name string) string {
	switch name {
	case "SIGKILL":
		return "killed"
	case "SIGTERM":
		return "terminated"
	case "SIGINT":
		return "interrupt"
	case "SIGHUP":
		return "hangup"
	case "SIGQUIT":
		return "quit"
	case "SIGPIPE":
		return "broken pipe"
	case "SIGSEGV":
		return "segmentation fault"
	case "SIGABRT":
		return "aborted"
	}
	return strings.ToLower(strings.TrimPrefix(name, "SIG"))
}

// agentError keeps what an agent answered from passing for a verdict on the
// caller's credentials: the agent runs inside the sandbox.
func agentError(err error) error {
	if errors.Is(err, errdefs.ErrUnauthenticated) || errors.Is(err, errdefs.ErrPermissionDenied) {
		return fmt.Errorf("the sandbox's agent refused: %s", err.Error())
	}
	return err
}

// selectedPID is the pid a ProcessSelector names, as the agent's ref.
func selectedPID(sel processSelector) (string, error) {
	switch {
	case sel.PID != nil:
		if *sel.PID == 0 {
			return "", errdefs.Invalid("process.pid", "is 0")
		}
		return strconv.FormatUint(uint64(*sel.PID), 10), nil
	case sel.Tag != nil:
		return "", fmt.Errorf("process tags are not supported (select processes by pid): %w", errdefs.ErrNotImplemented)
	}
	return "", errdefs.Invalid("process", "give a pid")
}

// agentCall sends a small request about the process sel names and
// discards the answer. A process that is gone is not_found.
func (s *Server) agentCall(r *http.Request, sel processSelector, what string, body []byte) error {
	pid, err := selectedPID(sel)
	if err != nil {
		return err
	}
	conn, err := s.opts.Sandboxes.Agent(r.Context(), SandboxID(r))
	if err != nil {
		return err
	}
	areq, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://agent/v1/terminals/"+pid+"/"+what, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := conn.Send(areq)
	if err != nil {
		return agentError(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}

func (s *Server) processControl(r *http.Request, sel processSelector, m wire.TerminalMessage) error {
	body, _ := json.Marshal(m)
	return s.agentCall(r, sel, "control", body)
}

func (s *Server) processList(r *http.Request, _ *empty) (*listResponse, error) {
	conn, err := s.opts.Sandboxes.Agent(r.Context(), SandboxID(r))
	if err != nil {
		return nil, err
	}
	var tl wire.TerminalList
	if err := conn.DoJSON(r.Context(), http.MethodGet, "/v1/terminals", nil, &tl); err != nil {
		return nil, agentError(err)
	}
	out := &listResponse{Processes: []processInfo{}}
	for _, t := range tl.Terminals {
		if !t.Running || t.PID <= 0 || len(t.Argv) == 0 {
			continue
		}
		cwd := t.Cwd
		out.Processes = append(out.Processes, processInfo{
			Config: processConfig{Cmd: t.Argv[0], Args: append([]string{}, t.Argv[1:]...), Envs: map[string]string{}, Cwd: &cwd},
			PID:    uint32(t.PID),
		})
	}
	return out, nil
}

func (s *Server) processSendInput(r *http.Request, req *sendInputRequest) (*empty, error) {
	if req.Input == nil {
		return nil, errdefs.Invalid("input", "give stdin or pty")
	}
	data := req.Input.Stdin
	if req.Input.PTY != nil {
		data = req.Input.PTY
	}
	return &empty{}, s.agentCall(r, req.Process, "input", data)
}

// parseSignal reads a Signal enum, by name or number.
func parseSignal(raw json.RawMessage) (string, error) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "SIGNAL_SIGKILL":
			return "SIGKILL", nil
		case "SIGNAL_SIGTERM":
			return "SIGTERM", nil
		}
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		switch n {
		case 9:
			return "SIGKILL", nil
		case 15:
			return "SIGTERM", nil
		}
	}
	return "", errdefs.Invalid("signal", "%.32s is not SIGNAL_SIGKILL or SIGNAL_SIGTERM", raw)
}

func (s *Server) processSendSignal(r *http.Request, req *sendSignalRequest) (*empty, error) {
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return nil, err
	}
	return &empty{}, s.processControl(r, req.Process, wire.TerminalMessage{Type: wire.TerminalSignal, Signal: sig})
}

func (s *Server) processUpdate(r *http.Request, req *updateRequest) (*empty, error) {
	if req.PTY == nil || req.PTY.Size == nil {
		_, err := selectedPID(req.Process)
		return &empty{}, err
	}
	sz := req.PTY.Size
	if sz.Cols < 1 || sz.Rows < 1 || sz.Cols > 1000 || sz.Rows > 1000 {
		return nil, errdefs.Invalid("pty.size", "cols and rows must be between 1 and 1000, got %dx%d", sz.Cols, sz.Rows)
	}
	return &empty{}, s.processControl(r, req.Process, wire.TerminalMessage{Type: wire.TerminalResize, Cols: int(sz.Cols), Rows: int(sz.Rows)})
}

func (s *Server) processCloseStdin(r *http.Request, req *closeStdinRequest) (*empty, error) {
	return &empty{}, s.processControl(r, req.Process, wire.TerminalMessage{Type: wire.TerminalStdinEOF})
}
