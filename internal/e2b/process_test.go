package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/agent"
	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/agentconn/agentconntest"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func ptr[T any](v T) *T { return &v }

func TestToStreamRequest(t *testing.T) {
	t.Parallel()
	basic := func(user string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":")) }
	tests := []struct {
		name    string
		req     startRequest
		headers map[string]string
		want    wire.ProcessStreamRequest
		wantErr error
	}{
		{
			name:    "commands.run as root, with cwd, envs and a timeout",
			req:     startRequest{Process: processConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi"}, Envs: map[string]string{"A": "1"}, Cwd: ptr("/tmp")}, Stdin: ptr(false)},
			headers: map[string]string{"Authorization": basic("root"), "Connect-Timeout-Ms": "10000"},
			want: wire.ProcessStreamRequest{
				TerminalRequest: wire.TerminalRequest{Argv: []string{"/bin/bash", "-l", "-c", "echo hi"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp", DetachTimeoutSec: 86400},
				User:            "root", TimeoutMs: 10000,
			},
		},
		{
			name: "no user: E2B's default user if the image has it; stdin kept open",
			req:  startRequest{Process: processConfig{Cmd: "cat"}, Stdin: ptr(true)},
			want: wire.ProcessStreamRequest{
				TerminalRequest: wire.TerminalRequest{Argv: []string{"cat"}, DetachTimeoutSec: 86400},
				User:            "user", UserOptional: true, Stdin: true,
			},
		},
		{
			name:    "pty.create; a lifetime past the agent's bound is clamped",
			req:     startRequest{Process: processConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}}, PTY: &ptyConfig{Size: &ptySize{Cols: 100, Rows: 30}}, Stdin: ptr(true)},
			headers: map[string]string{"Authorization": basic("user"), "Connect-Timeout-Ms": "999999999999"},
			want: wire.ProcessStreamRequest{
				TerminalRequest: wire.TerminalRequest{Argv: []string{"/bin/bash", "-i", "-l"}, TTY: true, Cols: 100, Rows: 30, DetachTimeoutSec: 86400},
				User:            "user", TimeoutMs: 86400000,
			},
		},
		{name: "no cmd", req: startRequest{}, wantErr: errdefs.ErrInvalidArgument},
		{name: "tag", req: startRequest{Process: processConfig{Cmd: "x"}, Tag: ptr("t")}, wantErr: errdefs.ErrNotImplemented},
		{name: "huge pty", req: startRequest{Process: processConfig{Cmd: "x"}, PTY: &ptyConfig{Size: &ptySize{Cols: 5000, Rows: 1}}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "not basic", req: startRequest{Process: processConfig{Cmd: "x"}}, headers: map[string]string{"Authorization": "Bearer x"}, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/process.Process/Start", nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got, err := toStreamRequest(r, &tt.req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("stream request (-want +got):\n%s", d)
			}
		})
	}
}

func TestEndOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   wire.TerminalMessage
		want string
	}{
		{wire.TerminalMessage{ExitCode: ptr(0)}, `{"exited":true,"status":"exit status 0"}`},
		{wire.TerminalMessage{ExitCode: ptr(3)}, `{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}`},
		{wire.TerminalMessage{ExitCode: ptr(137), Signal: "SIGKILL"}, `{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}`},
		{wire.TerminalMessage{ExitCode: ptr(143), Signal: "SIGTERM"}, `{"exitCode":-1,"status":"signal: terminated","error":"signal: terminated"}`},
	}
	for _, tt := range tests {
		b, _ := json.Marshal(endOf(tt.in))
		if string(b) != tt.want {
			t.Errorf("endOf(%+v): got %s, want %s", tt.in, b, tt.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{`"SIGNAL_SIGKILL"`: "SIGKILL", `"SIGNAL_SIGTERM"`: "SIGTERM", `9`: "SIGKILL", `15`: "SIGTERM"} {
		if got, err := parseSignal(json.RawMessage(raw)); err != nil || got != want {
			t.Errorf("parseSignal(%s): got %q, %v, want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{``, `"SIGNAL_UNSPECIFIED"`, `0`, `2`, `"SIGKILL"`, `{}`} {
		if _, err := parseSignal(json.RawMessage(raw)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseSignal(%s): got %v, want invalid_argument", raw, err)
		}
	}
}

func TestSelectedPID(t *testing.T) {
	t.Parallel()
	if got, err := selectedPID(processSelector{PID: ptr(uint32(42))}); err != nil || got != "42" {
		t.Errorf("pid 42: got %q, %v", got, err)
	}
	for _, sel := range []processSelector{{}, {PID: ptr(uint32(0))}, {Tag: ptr("x")}} {
		if _, err := selectedPID(sel); err == nil {
			t.Errorf("selector %+v: got no error", sel)
		}
	}
}

// procSandboxes serves one sandbox whose agent is conn.
type procSandboxes struct {
	Sandboxes
	id   string
	conn *agentconn.Conn
}

func (p procSandboxes) Agent(_ context.Context, id string) (*agentconn.Conn, error) {
	if id != p.id {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return p.conn, nil
}

// procServer is envd in front of one sandbox whose agent is h, over the
// daemon's real agent channel.
func procServer(t *testing.T, h http.Handler) (*Server, *httptest.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "hc-e2b-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	conn, err := agentconn.Listen("sb-proc", sock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	agentconntest.Serve(t, nc, agentconntest.Healthy(wire.AgentHealth{Version: "test", PID: 1}, h))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Secret: []byte("s"), Sandboxes: procSandboxes{id: "sb-proc", conn: conn}, Log: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

// startProcess calls Start and returns the stream's messages and its
// end-stream JSON.
func startProcess(t *testing.T, s *Server, hs *httptest.Server, req string, header ...string) (msgs []eventMessage, end string) {
	t.Helper()
	body := appendEnvelope(nil, flagMessage, []byte(req))
	r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/process.Process/Start", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/connect+json")
	r.Header.Set("E2b-Sandbox-Id", "sb-proc")
	r.Header.Set("X-Access-Token", s.EnvdToken("sb-proc"))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		flag, msg, err := readEnvelope(br)
		if err != nil {
			t.Fatalf("read envelope: %v (after %d messages)", err, len(msgs))
		}
		if flag == flagEndStream {
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the end-stream envelope: %v, want EOF", err)
			}
			return msgs, string(msg)
		}
		var m eventMessage
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatalf("message %s: %v", msg, err)
		}
		msgs = append(msgs, m)
	}
}

func TestStartThroughTheAgent(t *testing.T) {
	t.Parallel()
	h := agent.NewHandler(agent.Options{Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	s, hs := procServer(t, h)
	msgs, end := startProcess(t, s, hs, `{"process":{"cmd":"/bin/sh","args":["-c","echo out; echo err >&2; exit 4"],"envs":{}},"stdin":false}`)
	if end != "{}" {
		t.Errorf("end-stream: got %s, want {}", end)
	}
	if len(msgs) < 2 || msgs[0].Event.Start == nil || msgs[0].Event.Start.PID == 0 {
		t.Fatalf("messages %+v: want start{pid} first", msgs)
	}
	last := msgs[len(msgs)-1].Event.End
	if last == nil || last.ExitCode != 4 || !last.Exited {
		t.Fatalf("last message %+v: want end with exit code 4", msgs[len(msgs)-1])
	}
	var out, errOut string
	for _, m := range msgs[1 : len(msgs)-1] {
		if d := m.Event.Data; d != nil {
			out += string(d.Stdout)
			errOut += string(d.Stderr)
		}
	}
	if out != "out\n" || errOut != "err\n" {
		t.Errorf("output: got %q and %q, want out and err", out, errOut)
	}

	// An unknown user is refused in the end-stream, before any message.
	msgs, end = startProcess(t, s, hs, `{"process":{"cmd":"true"}}`, "Authorization", "Basic bm8tc3VjaC11c2VyOg==")
	if len(msgs) != 0 || !strings.Contains(end, `"invalid_argument"`) || !strings.Contains(end, "no-such-user") {
		t.Errorf("unknown user: got %d messages and %s, want invalid_argument naming the user", len(msgs), end)
	}
}

// A quiet process gets keepalives at the client's Keepalive-Ping-Interval,
// after the start event and before the end.
func TestStartKeepalivesWhileQuiet(t *testing.T) {
	t.Parallel()
	h := agent.NewHandler(agent.Options{Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	s, hs := procServer(t, h)
	msgs, end := startProcess(t, s, hs, `{"process":{"cmd":"sleep","args":["2.5"]}}`, "Keepalive-Ping-Interval", "1")
	if end != "{}" || len(msgs) < 3 {
		t.Fatalf("got %d messages and %s", len(msgs), end)
	}
	if msgs[0].Event.Start == nil || msgs[len(msgs)-1].Event.End == nil {
		t.Fatalf("messages %+v: want start first and end last", msgs)
	}
	keepalives := 0
	for _, m := range msgs[1 : len(msgs)-1] {
		if m.Event.Keepalive != nil {
			keepalives++
		}
	}
	if keepalives == 0 {
		t.Errorf("no keepalive in %d messages of a 2.5 s quiet process at a 1 s interval", len(msgs))
	}
}

func TestUnaryCallsThroughTheAgent(t *testing.T) {
	t.Parallel()
	h := agent.NewHandler(agent.Options{Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	s, hs := procServer(t, h)
	call := func(method, body string) (int, string) {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/process.Process/"+method, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("E2b-Sandbox-Id", "sb-proc")
		r.Header.Set("X-Access-Token", s.EnvdToken("sb-proc"))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	tests := []struct {
		method, body string
		status       int
		want         string
	}{
		{"List", `{}`, 200, `{"processes":[]}`},
		// The SDK's kill returns false on not_found.
		{"SendSignal", `{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}`, 404, `"code":"not_found"`},
		{"SendSignal", `{"process":{"pid":1},"signal":"SIGNAL_SIGINT"}`, 400, `"code":"invalid_argument"`},
		{"SendInput", `{"process":{"pid":999999},"input":{"stdin":"eA=="}}`, 404, `"code":"not_found"`},
		{"CloseStdin", `{"process":{"pid":999999}}`, 404, `"code":"not_found"`},
		{"Update", `{"process":{"pid":999999},"pty":{"size":{"cols":0,"rows":10}}}`, 400, `"code":"invalid_argument"`},
		{"Update", `{"process":{"tag":"x"}}`, 501, `"code":"unimplemented"`},
		{"StreamInput", `{}`, 501, `"code":"unimplemented"`},
	}
	for _, tt := range tests {
		status, body := call(tt.method, tt.body)
		if status != tt.status || !strings.Contains(body, tt.want) {
			t.Errorf("%s %s: got %d %s, want %d with %s", tt.method, tt.body, status, body, tt.status, tt.want)
		}
	}
}

// A hostile agent's oversized frame ends the stream with an error: the
// daemon does not buffer what the sandbox claims it will send.
func TestStartRefusesAHugeFrameFromTheAgent(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		info, _ := json.Marshal(wire.TerminalInfo{ID: "0123456789abcdef", PID: 7})
		var hdr [5]byte
		hdr[0] = wire.TerminalFrameReady
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(info)))
		w.Write(hdr[:])
		w.Write(info)
		hdr[0] = wire.TerminalFrameStdout
		binary.BigEndian.PutUint32(hdr[1:], 1<<31)
		w.Write(hdr[:])
		w.Write(bytes.Repeat([]byte("x"), 64<<10))
	})
	s, hs := procServer(t, h)
	msgs, end := startProcess(t, s, hs, `{"process":{"cmd":"x"}}`)
	if len(msgs) != 1 || msgs[0].Event.Start == nil || msgs[0].Event.Start.PID != 7 {
		t.Errorf("messages %+v: want only start{pid:7}", msgs)
	}
	if !strings.Contains(end, `"unavailable"`) || !strings.Contains(end, "larger than") {
		t.Errorf("end-stream %s: want an unavailable error about the frame size", end)
	}
}

func FuzzReadTerminalFrame(f *testing.F) {
	f.Add([]byte{'r', 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{'o', 0, 0, 0, 1})
	f.Add([]byte{'x', 0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			_, p, err := wire.ReadTerminalFrame(r, 64)
			if err != nil {
				return
			}
			if len(p) > 64 {
				t.Fatalf("payload of %d bytes past the bound", len(p))
			}
		}
	})
}

func FuzzStartRequest(f *testing.F) {
	f.Add(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false}`, "cm9vdDo=", "10000")
	f.Add(`{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":24}}}`, "", "")
	f.Fuzz(func(t *testing.T, body, auth, timeout string) {
		var req startRequest
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		r := httptest.NewRequest(http.MethodPost, "/process.Process/Start", nil)
		if auth != "" {
			r.Header.Set("Authorization", "Basic "+auth)
		}
		r.Header.Set("Connect-Timeout-Ms", timeout)
		out, err := toStreamRequest(r, &req)
		if err != nil {
			return
		}
		if len(out.Argv) == 0 || out.Argv[0] != req.Process.Cmd || out.User == "" {
			t.Fatalf("request %s gave %+v", body, out)
		}
		if out.TimeoutMs < 0 || out.TimeoutMs > processDetach.Milliseconds() || out.Cols > 1000 || out.Rows > 1000 {
			t.Fatalf("request %s: out of bounds %+v", body, out)
		}
	})
}
