package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/wire"
)

// termReadLimit bounds one client message (stdin chunk or control).
const termReadLimit = 1 << 20

func acceptTerminal(w http.ResponseWriter, r *http.Request) (*websocket.Conn, error) {
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The daemon is the only peer and has authenticated the client;
		// a browser cannot send the bearer token a cross-site page would need.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		return nil, fmt.Errorf("accept terminal websocket: %w", err)
	}
	conn.SetReadLimit(termReadLimit)
	return conn, nil
}

// serve runs one client's attachment to s until the process exits (the
// client gets the exit as the last message), the client goes away or is
// replaced by another, or ctx ends. Then the session is detached, not
// ended: the grace period starts.
func (t *terminals) serve(ctx context.Context, conn *websocket.Conn, s *termSession) {
	defer conn.CloseNow()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	att, replay := s.attach()
	defer s.detach(att, t.expire)

	keepalive := t.h.opts.Keepalive
	send := func(typ websocket.MessageType, data []byte) error {
		// A deadline per message bounds a stalled client without limiting
		// a slow but live one.
		wctx, c := context.WithTimeout(ctx, streamWriteDeadline)
		defer c()
		return conn.Write(wctx, typ, data)
	}
	sendMsg := func(m wire.TerminalMessage) error {
		data, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return send(websocket.MessageText, data)
	}

	go func() {
		defer cancel()
		t.readClient(ctx, conn, s, sendMsg)
	}()
	go func() {
		// Pings notice a client that vanished without closing; a pong
		// needs the client's reader, so a client that stops reading for
		// long is taken for gone as well (its output waits in the ring).
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				pctx, c := context.WithTimeout(ctx, 2*keepalive+streamWriteDeadline)
				err := conn.Ping(pctx)
				c()
				if err != nil {
					cancel()
					return
				}
			}
		}
	}()

	if sendMsg(wire.TerminalMessage{Type: wire.TerminalReady, SessionID: s.id, TTY: s.tty}) != nil {
		return
	}
	for _, frame := range replay {
		if send(websocket.MessageBinary, frame) != nil {
			return
		}
	}
	for {
		select {
		case frame := <-att.out:
			if send(websocket.MessageBinary, frame) != nil {
				return
			}
		case <-s.done:
			// The pumps finished before done closed, so every frame has
			// gone out ahead of the exit.
			s.mu.Lock()
			st := s.status
			s.mu.Unlock()
			code := st.Code
			if sendMsg(wire.TerminalMessage{Type: wire.TerminalExit, ExitCode: &code, Signal: st.SignalName()}) != nil {
				return
			}
			// Delivered: there is nothing left to re-attach to.
			t.drop(s)
			_ = conn.Close(websocket.StatusNormalClosure, "exited")
			return
		case <-att.gone:
			_ = sendMsg(wire.TerminalMessage{Type: wire.TerminalError, Message: "terminal " + s.id + " was attached by another client"})
			_ = conn.Close(websocket.StatusPolicyViolation, "attached elsewhere")
			return
		case <-ctx.Done():
			return
		}
	}
}

// readClient passes stdin and control messages to s until the client
// closes or ctx ends. A control message that cannot be carried out is
// answered with an error message; the session goes on.
func (t *terminals) readClient(ctx context.Context, conn *websocket.Conn, s *termSession, sendMsg func(wire.TerminalMessage) error) {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) > 0 && !s.exited() {
				if err := s.writeStdin(data); err != nil {
					_ = sendMsg(wire.TerminalMessage{Type: wire.TerminalError, Message: err.Error()})
				}
			}
			continue
		}
		if err := t.control(s, data); err != nil {
			if sendMsg(wire.TerminalMessage{Type: wire.TerminalError, Message: err.Error()}) != nil {
				return
			}
		}
	}
}

func (t *terminals) control(s *termSession, data []byte) error {
	m, err := parseTermControl(data)
	if err != nil {
		return err
	}
	switch m.Type {
	case wire.TerminalResize:
		return s.resize(m.Cols, m.Rows)
	case wire.TerminalSignal:
		sig, _ := parseTermSignal(m.Signal) // checked by parseTermControl
		return s.signal(sig)
	default: // wire.TerminalStdinEOF
		if err := s.closeStdin(); err != nil && !errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("close stdin: %w", err)
		}
		return nil
	}
}

// parseTermControl decodes and checks one client control message.
func parseTermControl(data []byte) (wire.TerminalMessage, error) {
	var m wire.TerminalMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("control message: not JSON: %v", err)
	}
	switch m.Type {
	case wire.TerminalResize:
		if m.Cols < 1 || m.Cols > maxTermSize {
			return m, fmt.Errorf("resize: cols must be between 1 and %d, got %d", maxTermSize, m.Cols)
		}
		if m.Rows < 1 || m.Rows > maxTermSize {
			return m, fmt.Errorf("resize: rows must be between 1 and %d, got %d", maxTermSize, m.Rows)
		}
	case wire.TerminalSignal:
		if _, err := parseTermSignal(m.Signal); err != nil {
			return m, err
		}
	case wire.TerminalStdinEOF:
	default:
		return m, fmt.Errorf("control message: unknown type %.32q (want resize, signal or stdin_eof)", m.Type)
	}
	return m, nil
}

// parseTermSignal accepts "SIGINT", "INT" or "2".
func parseTermSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("signal: %d is not a signal number (1-64)", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("signal: %.32q is not a signal name or number", s)
}
