package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/hotcell/hotcell/client"
)

// procAPI fakes the process routes of sandbox sb1.
type procAPI struct {
	mu       sync.Mutex
	requests []string
	bodies   map[string]string
}

func newProcAPI(t *testing.T) (*procAPI, map[string]string) {
	p := &procAPI{bodies: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	return p, envFor(srv.URL)
}

func (p *procAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.requests = append(p.requests, r.Method+" "+r.URL.RequestURI())
	p.bodies[r.URL.Path] = string(body)
	p.mu.Unlock()
	code := 143
	started := time.Now().Add(-2 * time.Minute)
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/processes":
		jsonReply(w, 200, client.ProcessList{Processes: []client.Process{
			{ID: "7", Name: "web", Argv: []string{"python3", "-m", "http.server"}, State: client.ProcessRunning, StartedAt: started},
			{ID: "9", Command: "make test\nmore", State: client.ProcessExited, ExitCode: &code, Signal: "SIGTERM", StartedAt: started},
		}})
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes/sb1/processes":
		jsonReply(w, 200, client.Process{ID: "12", State: client.ProcessRunning})
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes/sb1/processes/7/signal":
		w.WriteHeader(204)
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/processes/8/logs":
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(client.LogEvent{Type: client.EventStdout, Offset: 0, Data: []byte("title\x1b]0;pwned\x07 clear\x1b[2J ok \xe2")})
		enc.Encode(client.LogEvent{Type: client.EventStdout, Offset: 30, Data: []byte("\x9c\x93\n")})
		enc.Encode(client.LogEvent{Type: client.EventEnd})
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/processes/7/logs":
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(client.LogEvent{Type: client.EventStdout, Offset: 0, Data: []byte("out1\n")})
		enc.Encode(client.LogEvent{Type: client.EventStderr, Offset: 0, Data: []byte("err1\n")})
		enc.Encode(client.LogEvent{Type: client.EventGap, Stream: client.EventStdout, Offset: 105, Dropped: 100})
		enc.Encode(client.LogEvent{Type: client.EventStdout, Offset: 105, Data: []byte("out2\n")})
		if r.URL.Query().Get("follow") == "true" {
			enc.Encode(client.LogEvent{Type: client.EventExit, ExitCode: 3})
		} else {
			enc.Encode(client.LogEvent{Type: client.EventEnd})
		}
	default:
		errReply(w, 404, "not_found", "process "+r.URL.Path+": not found")
	}
}

func TestPs(t *testing.T) {
	_, env := newProcAPI(t)
	res := runCLI(t, env, "ps", "sb1", "--all")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 3 {
		t.Fatalf("got %+v, want a header and two rows", res)
	}
	for i, want := range [][]string{
		{"ID", "NAME", "STATE", "EXIT", "STARTED", "COMMAND"},
		{"7", "web", "running", "-", "2 minutes ago", "python3 -m http.server"},
		{"9", "-", "exited", "143 (SIGTERM)", "2 minutes ago", `make test\nmore`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q: no %q", i, lines[i], w)
			}
		}
	}
	var list client.ProcessList
	res = runCLI(t, env, "ps", "sb1", "--json")
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list.Processes) != 2 {
		t.Errorf("ps --json: got %q, %v", res.stdout, err)
	}
	if res := runCLI(t, env, "ps", "sb1", "-q"); res.stdout != "7\n9\n" {
		t.Errorf("ps -q: got %q", res.stdout)
	}
}

func TestPsAsksForRunningOnly(t *testing.T) {
	p, env := newProcAPI(t)
	runCLI(t, env, "ps", "sb1", "--name", "web")
	if got, want := p.requests[0], "GET /v1/sandboxes/sb1/processes?name=web&state=running"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRunAndKill(t *testing.T) {
	p, env := newProcAPI(t)
	res := runCLI(t, env, "run", "sb1", "--name", "web", "--keep-alive", "-e", "A=1", "--", "python3", "-m", "http.server")
	if res.code != 0 || res.stdout != "12\n" {
		t.Fatalf("run: got %+v, want the process id", res)
	}
	var req client.StartProcessRequest
	json.Unmarshal([]byte(p.bodies["/v1/sandboxes/sb1/processes"]), &req)
	if req.Name != "web" || !req.KeepAlive || req.Env["A"] != "1" || strings.Join(req.Argv, " ") != "python3 -m http.server" {
		t.Errorf("run sent %+v", req)
	}
	if res := runCLI(t, env, "kill", "sb1", "7", "-s", "KILL"); res.code != 0 {
		t.Fatalf("kill: got %+v", res)
	}
	if got := p.bodies["/v1/sandboxes/sb1/processes/7/signal"]; !strings.Contains(got, `"signal":"KILL"`) {
		t.Errorf("kill sent %q", got)
	}
}

func TestLogs(t *testing.T) {
	_, env := newProcAPI(t)
	res := runCLI(t, env, "logs", "sb1", "7")
	if res.code != 0 || res.stdout != "out1\nout2\n" || !strings.Contains(res.stderr, "err1\n") || !strings.Contains(res.stderr, "100 bytes of stdout were rotated out") {
		t.Errorf("logs: got %+v", res)
	}
	if res := runCLI(t, env, "logs", "-f", "sb1", "7"); res.code != 3 {
		t.Errorf("logs -f: got exit %d, want the process's 3", res.code)
	}
	res = runCLI(t, env, "logs", "--json", "-f", "sb1", "7")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 5 || !strings.Contains(lines[4], `"type":"exit"`) || !strings.Contains(lines[4], `"exitCode":3`) {
		t.Errorf("logs --json: got %q, want 4 events and the exit", lines)
	}
}

func TestProcessUsageErrors(t *testing.T) {
	_, env := newProcAPI(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "sb1", "7", "--stdout", "--stderr"}, "not both"},
		{[]string{"logs", "sb1", "7", "--from", "10"}, "--from needs --stdout or --stderr"},
		{[]string{"logs", "sb1", "7", "--stdout", "--from", "-1"}, "want a byte offset"},
		{[]string{"kill", "sb1", "7", "-s", "NOPE"}, `--signal "NOPE"`},
		{[]string{"run", "sb1"}, "no command"},
		{[]string{"run", "sb1", "-c", "x", "--", "y"}, "not both"},
		{[]string{"shell", "sb1", "--attach", "s1", "--", "sh"}, "takes no command"},
		{[]string{"port-forward", "sb1", "99999"}, "not a port number"},
	} {
		res := runCLI(t, env, tt.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tt.want) {
			t.Errorf("%v: got %+v, want exit 2 and %q", tt.args, res, tt.want)
		}
	}
}

// TestHelpHasExamples: every command shows how it is used.
func TestHelpHasExamples(t *testing.T) {
	a := &app{getenv: func(string) string { return "" }}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.Name() != "help" && !strings.HasPrefix(c.CommandPath(), "hotcell completion") && c.Example == "" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := a.rootCmd()
	root.InitDefaultCompletionCmd()
	walk(root)
}

func TestFlagSuggestion(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ps", "sb1", "--jsno"}, "did you mean --json?"},
		{[]string{"logs", "sb1", "7", "--folow"}, "did you mean --follow?"},
		{[]string{"stats", "sb1", "--stram"}, "did you mean --stream?"},
		{[]string{"ps", "sb1", "--urll", "x"}, "did you mean --url?"},
	} {
		res := runCLI(t, nil, tt.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tt.want) {
			t.Errorf("%v: got %+v, want %q", tt.args, res, tt.want)
		}
	}
	if res := runCLI(t, nil, "ps", "sb1", "--zzzzzzzz"); strings.Contains(res.stderr, "did you mean") {
		t.Errorf("a flag like no other got a suggestion: %q", res.stderr)
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		res := runCLI(t, nil, "completion", sh)
		if res.code != 0 || !strings.Contains(res.stdout, "hotcell") {
			t.Errorf("completion %s: exit %d, %d bytes", sh, res.code, len(res.stdout))
		}
	}
}

// openPTY opens a pseudo-terminal pair: what the CLI writes to tty is read
// from pt, and isTTY(tty) holds as for a real terminal.
func openPTY(t *testing.T) (pt, tty *os.File) {
	t.Helper()
	pt, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { pt.Close() })
	if err := unix.IoctlSetPointerInt(int(pt.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(pt.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	// Raw mode: the terminal must not translate what the CLI writes.
	if _, err := term.MakeRaw(int(tty.Fd())); err != nil {
		t.Fatal(err)
	}
	return pt, tty
}

// TestLogsOnTerminal: process output with terminal control sequences is
// escaped when stdout is a terminal, a rune cut between two events
// included, printed as it is with --raw, and byte for byte to a pipe.
func TestLogsOnTerminal(t *testing.T) {
	_, env := newProcAPI(t)
	const payload = "title\x1b]0;pwned\x07 clear\x1b[2J ok ✓\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `title\x1b]0;pwned\x07 clear\x1b[2J ok ✓` + "\n"},
		{[]string{"--raw"}, payload},
	} {
		pt, tty := openPTY(t)
		args := append([]string{"logs", "sb1", "8"}, tc.args...)
		var stderr strings.Builder
		code := run(t.Context(), args, strings.NewReader(""), tty, &stderr, func(k string) string { return env[k] })
		if code != 0 {
			t.Fatalf("hotcell %v: exit %d: %s", args, code, stderr.String())
		}
		tty.Close()
		got, _ := io.ReadAll(pt) // ends with EIO once the tty side is closed
		if string(got) != tc.want {
			t.Errorf("hotcell %v on a terminal: got %q, want %q", args, got, tc.want)
		}
	}
	if res := runCLI(t, env, "logs", "sb1", "8"); res.code != 0 || res.stdout != payload {
		t.Errorf("hotcell logs to a pipe: got %+v, want the bytes %q", res, payload)
	}
}
