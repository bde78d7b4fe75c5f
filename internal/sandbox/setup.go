package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// setupTail is how much of a setup command's output is kept.
const setupTail = 4 << 10

// runSetup runs one setup command through the agent's streaming exec, so
// that the tail it keeps has stdout and stderr in the order they came.
func runSetup(ctx context.Context, conn *agentconn.Conn, command string, timeout time.Duration) (wire.SetupResult, error) {
	body, _ := json.Marshal(wire.ExecRequest{Command: command, Cwd: fspath.Workspace, TimeoutMs: timeout.Milliseconds()})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent/v1/exec?stream=true", strings.NewReader(string(body)))
	if err != nil {
		return wire.SetupResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := conn.Do(req)
	if err != nil {
		return wire.SetupResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return wire.SetupResult{}, errdefs.Read(resp)
	}
	res := wire.SetupResult{Command: command}
	var tail []byte
	sc := bufio.NewScanner(resp.Body)
	// An event carries at most 32 KiB of output (the agent's read size),
	// under 200 KiB as JSON; a longer line is not the agent's.
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return res, fmt.Errorf("decode exec event: %w", err)
		}
		switch ev.Type {
		case wire.EventStdout, wire.EventStderr:
			tail = append(tail, ev.Data...)
			if len(tail) > setupTail {
				tail = append(tail[:0], tail[len(tail)-setupTail:]...)
			}
		case wire.EventExit:
			res.ExitCode = ev.ExitCode
			res.Signal = ev.Signal
			res.TimedOut = ev.TimedOut
			res.DurationMs = ev.DurationMs
			res.OutputTail = strings.ToValidUTF8(string(tail), "\uFFFD")
			return res, nil
		case wire.EventStreamError:
			var se wire.StreamError
			_ = json.Unmarshal(sc.Bytes(), &se)
			return res, fmt.Errorf("exec: %s (%s)", se.Error.Message, se.Error.Code)
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("read exec stream: %w", err)
	}
	return res, fmt.Errorf("exec stream ended without an exit event: %w", errdefs.ErrUnavailable)
}
