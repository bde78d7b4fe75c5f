package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// ProcessStreamRequest starts a terminal session and follows it on the same
// request (the agent's POST /v1/terminals/stream), for E2B's process
// service: the answer is a stream of frames (TerminalFrame*), the session
// outlives the request (and the daemon) like any terminal, and
// GET /v1/terminals/{sid|pid}/stream follows it again. It is agent-only: the
// daemon's own terminal API does not take it.
type ProcessStreamRequest struct {
	TerminalRequest
	// User runs the process as this user of the image: its uid, gid and
	// groups, HOME, USER and LOGNAME, and its home as the default cwd.
	// Empty: the agent's own user.
	User string `json:"user,omitempty"`
	// UserOptional runs the process as the agent's user when User does not
	// exist in the image, instead of refusing.
	UserOptional bool `json:"userOptional,omitempty"`
	// TimeoutMs, if set, is the process's lifetime: its session is killed
	// when it runs out.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Stdin keeps a pipe-mode process's stdin open for input until it is
	// closed; without it stdin is at EOF from the start.
	Stdin bool `json:"stdin,omitempty"`
}

// Frames of a process stream: a type byte, a 4-byte big-endian length and
// the payload.
const (
	TerminalFrameReady  byte = 'r' // TerminalInfo JSON: the first frame
	TerminalFrameStdout byte = 'o' // bytes
	TerminalFrameStderr byte = 'e' // bytes
	TerminalFramePTY    byte = 'p' // bytes
	TerminalFrameAlive  byte = 'k' // empty: keepalive while quiet
	TerminalFrameExit   byte = 'x' // TerminalMessage JSON (exitCode, signal): the last frame
)

// ReadTerminalFrame reads one frame of a process stream. A payload longer
// than max is an error (the agent sends at most 32 KiB of output at once).
func ReadTerminalFrame(r io.Reader, max int) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("process stream frame of %d bytes is larger than %d", n, max)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("short process stream frame: %w", io.ErrUnexpectedEOF)
	}
	return hdr[0], payload, nil
}
