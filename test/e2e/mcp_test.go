package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

var mcpTools = []string{
	"exec", "file_list", "file_read", "file_write", "process_list", "process_logs",
	"process_signal", "process_start", "run_code", "sandbox_create", "sandbox_destroy", "sandbox_list",
}

func daemonToken(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	tok, err := client.ReadTokenFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// mcpCall calls a tool and decodes its structured result into out. A tool
// error fails the test.
func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res := mcpCallRaw(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, mcpText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: decode %s: %v", name, b, err)
	}
}

func mcpCallRaw(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func checkMCPTools(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("list tools: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil || len(s.Properties) == 0 {
			t.Errorf("%s: input schema %s has no properties", tool.Name, b)
		}
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpTools) {
		t.Errorf("tools %v, want %v", names, mcpTools)
	}
}

type mcpExecResult struct {
	ExitCode    int    `json:"exitCode"`
	TimedOut    bool   `json:"timedOut"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	StdoutBytes int64  `json:"stdoutBytes"`
	Note        string `json:"note"`
}

// TestMCPStdio runs the built `hotcell mcp` as an agent's MCP host would,
// and drives a whole session through it.
func TestMCPStdio(t *testing.T) {
	d := sharedDaemon(t)
	bin := testenv.GoBuild(t, "./cmd/hotcell")
	cmd := exec.Command(bin, "mcp")
	cmd.Env = append(os.Environ(), "HOTCELL_URL=http://"+d.Addr, "HOTCELL_TOKEN="+daemonToken(t, d))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to hotcell mcp: %v\n%s", err, stderr.String())
	}
	defer func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v\n%s", err, stderr.String())
		}
	}()
	if info := cs.InitializeResult(); info == nil || info.ServerInfo.Name != "hotcell" || info.Instructions == "" {
		t.Errorf("initialize result %+v, want hotcell with instructions", info)
	}
	checkMCPTools(t, cs)

	// create
	label := sanitizeLabel(t.Name())
	var sb struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Setup []struct {
			ExitCode int `json:"exitCode"`
		} `json:"setup"`
	}
	mcpCall(t, cs, "sandbox_create", map[string]any{
		"labels": map[string]any{"test": label},
		"env":    map[string]any{"GREETING": "hi"},
		"setup":  []any{"mkdir -p /workspace/setup-ran"},
	}, &sb)
	t.Cleanup(func() {
		// The test destroys it through MCP; this is for when it fails first.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.C.DeleteSandbox(ctx, sb.ID)
	})
	if sb.ID == "" || sb.State != "running" || len(sb.Setup) != 1 || sb.Setup[0].ExitCode != 0 {
		t.Fatalf("created %+v, want a running sandbox whose setup succeeded", sb)
	}

	var list struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	mcpCall(t, cs, "sandbox_list", map[string]any{"labels": map[string]any{"test": label}}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list by label: %+v, want just %s", list, sb.ID)
	}

	// write → exec → read
	const content = "hello from mcp\nünïcode ✓\n"
	var wrote struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	mcpCall(t, cs, "file_write", map[string]any{"sandboxId": sb.ID, "path": "notes/hello.txt", "content": content}, &wrote)
	if wrote.Path != "/workspace/notes/hello.txt" || wrote.Size != int64(len(content)) {
		t.Errorf("wrote %+v", wrote)
	}
	var ex mcpExecResult
	mcpCall(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "cat notes/hello.txt; echo $GREETING; ls -d setup-ran"}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != content+"hi\nsetup-ran\n" {
		t.Errorf("exec cat: exit %d, stdout %q, stderr %q", ex.ExitCode, ex.Stdout, ex.Stderr)
	}
	var rd struct {
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
		EOF      bool   `json:"eof"`
		Size     int64  `json:"size"`
	}
	mcpCall(t, cs, "file_read", map[string]any{"sandboxId": sb.ID, "path": "/workspace/notes/hello.txt"}, &rd)
	if rd.Content != content || rd.Encoding != "text" || !rd.EOF || rd.Size != int64(len(content)) {
		t.Errorf("file_read: %+v", rd)
	}

	// Binary content goes both ways as base64.
	bin4 := []byte{0, 1, 0xfe, 0xff}
	mcpCall(t, cs, "file_write", map[string]any{"sandboxId": sb.ID, "path": "bin.dat", "content": base64.StdEncoding.EncodeToString(bin4), "encoding": "base64"}, &wrote)
	mcpCall(t, cs, "file_read", map[string]any{"sandboxId": sb.ID, "path": "bin.dat"}, &rd)
	if got, _ := base64.StdEncoding.DecodeString(rd.Content); rd.Encoding != "base64" || !bytes.Equal(got, bin4) {
		t.Errorf("binary read back as %s %q", rd.Encoding, rd.Content)
	}

	var ls struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"entries"`
	}
	mcpCall(t, cs, "file_list", map[string]any{"sandboxId": sb.ID, "path": "notes"}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Name != "hello.txt" || ls.Entries[0].Type != "file" || ls.Entries[0].Size != int64(len(content)) {
		t.Errorf("file_list: %+v", ls)
	}

	// A failing command is a result, not a tool error; long output keeps
	// its head and tail and says exactly how much is missing.
	mcpCall(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "echo oops >&2; exit 3"}, &ex)
	if ex.ExitCode != 3 || ex.Stderr != "oops\n" {
		t.Errorf("exit 3: got exit %d, stderr %q", ex.ExitCode, ex.Stderr)
	}
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	mcpCall(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "argv": []any{"seq", "1", "20000"}}, &ex)
	if ex.StdoutBytes != int64(want.Len()) || !strings.HasPrefix(ex.Stdout, "1\n2\n3\n") || !strings.HasSuffix(ex.Stdout, "19999\n20000\n") ||
		!strings.Contains(ex.Stdout, " bytes omitted; ") || len(ex.Stdout) > 17<<10 || !strings.Contains(ex.Note, "file_read") {
		t.Errorf("long output: %d bytes (of %d), note %q, stdout %q...%q", len(ex.Stdout), ex.StdoutBytes, ex.Note, ex.Stdout[:min(40, len(ex.Stdout))], ex.Stdout[max(0, len(ex.Stdout)-40):])
	}

	// A background process and its logs.
	var proc struct {
		ProcessID string `json:"processId"`
	}
	mcpCall(t, cs, "process_start", map[string]any{"sandboxId": sb.ID, "name": "greeter", "command": "echo started; sleep 0.3; echo done >&2"}, &proc)
	var logs struct {
		Process struct {
			State    string `json:"state"`
			ExitCode *int   `json:"exitCode"`
		} `json:"process"`
		Stdout           string `json:"stdout"`
		Stderr           string `json:"stderr"`
		StdoutNextOffset int64  `json:"stdoutNextOffset"`
		StderrNextOffset int64  `json:"stderrNextOffset"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mcpCall(t, cs, "process_logs", map[string]any{"sandboxId": sb.ID, "processId": proc.ProcessID}, &logs)
		if logs.Process.State == "exited" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if logs.Process.ExitCode == nil || *logs.Process.ExitCode != 0 || logs.Stdout != "started\n" || logs.Stderr != "done\n" ||
		logs.StdoutNextOffset != 8 || logs.StderrNextOffset != 5 {
		t.Errorf("process logs: %+v", logs)
	}
	mcpCall(t, cs, "process_logs", map[string]any{"sandboxId": sb.ID, "processId": proc.ProcessID, "stdoutOffset": 8, "stderrOffset": 5}, &logs)
	if logs.Stdout != "" || logs.Stderr != "" {
		t.Errorf("logs past the end: %+v", logs)
	}

	// The API's errors reach the agent as tool errors, with its message.
	res := mcpCallRaw(t, cs, "file_read", map[string]any{"sandboxId": sb.ID, "path": "no/such/file"})
	if !res.IsError || !strings.Contains(mcpText(res), "no/such/file") {
		t.Errorf("reading a missing file: error %v, %q", res.IsError, mcpText(res))
	}
	res = mcpCallRaw(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "true", "argv": []any{"true"}})
	if !res.IsError || !strings.Contains(mcpText(res), "argv") {
		t.Errorf("command and argv: error %v, %q", res.IsError, mcpText(res))
	}

	// destroy
	var gone struct {
		Destroyed bool `json:"destroyed"`
	}
	mcpCall(t, cs, "sandbox_destroy", map[string]any{"sandboxId": sb.ID}, &gone)
	if !gone.Destroyed {
		t.Error("sandbox_destroy did not say destroyed")
	}
	if got, err := d.C.GetSandbox(t.Context(), sb.ID); err == nil && got.State != client.StateDestroyed {
		t.Errorf("after sandbox_destroy the sandbox is %s", got.State)
	} else if err != nil && !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after destroy: %v", err)
	}
	res = mcpCallRaw(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "true"})
	if !res.IsError || !strings.Contains(mcpText(res), sb.ID) {
		t.Errorf("exec in a destroyed sandbox: error %v, %q", res.IsError, mcpText(res))
	}
}

// bearerTransport sends the daemon's token, as an MCP host configured with
// a header would.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTP uses the daemon's own MCP endpoint, /v1/mcp.
func TestMCPHTTP(t *testing.T) {
	d := sharedDaemon(t)
	endpoint := "http://" + d.Addr + "/v1/mcp"

	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
	_, err = mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil)
	if err == nil {
		t.Error("an MCP client without the token connected")
	}

	tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{daemonToken(t, d)}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect to /v1/mcp: %v", err)
	}
	defer cs.Close()
	checkMCPTools(t, cs)

	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	var ex mcpExecResult
	mcpCall(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "echo hi from $0; echo to stderr >&2", "timeoutMs": 10000}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != "hi from /bin/sh\n" || ex.Stderr != "to stderr\n" {
		t.Errorf("exec over /v1/mcp: %+v", ex)
	}
	// The endpoint's exec is the API's: a timeout kills the command.
	mcpCall(t, cs, "exec", map[string]any{"sandboxId": sb.ID, "command": "sleep 30", "timeoutMs": 300}, &ex)
	if !ex.TimedOut || !strings.Contains(ex.Note, "timeoutMs") {
		t.Errorf("exec past its timeout: %+v", ex)
	}
}

// TestMCPStdioPipedInput writes every request at once and closes stdin, as
// `printf ... | hotcell mcp` does: each request read before the end of
// input must still get its answer, and the process must then exit.
func TestMCPStdioPipedInput(t *testing.T) {
	d := sharedDaemon(t)
	bin := testenv.GoBuild(t, "./cmd/hotcell")
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp")
	cmd.Env = append(os.Environ(), "HOTCELL_URL=http://"+d.Addr, "HOTCELL_TOKEN="+daemonToken(t, d))
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hotcell mcp: %v\n%s", err, stderr.String())
	}
	got := map[float64]json.RawMessage{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var resp struct {
			ID     float64         `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &resp); err != nil {
			t.Fatalf("decode %q: %v", line, err)
		}
		if resp.Error != nil {
			t.Errorf("request %v: error %s", resp.ID, resp.Error)
		}
		got[resp.ID] = resp.Result
	}
	for _, id := range []float64{1, 2, 3} {
		if got[id] == nil {
			t.Errorf("no answer to request %v; stdout:\n%s\nstderr:\n%s", id, out, stderr.String())
		}
	}
	if r := string(got[2]); !strings.Contains(r, `"sandbox_create"`) {
		t.Errorf("tools/list answered %s, want the sandbox_create tool", r)
	}
	if r := string(got[3]); !strings.Contains(r, `"structuredContent"`) || strings.Contains(r, `"isError":true`) {
		t.Errorf("tools/call sandbox_list answered %s, want a successful tool result", r)
	}
}
