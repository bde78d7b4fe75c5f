package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// runCode runs code buffered and fails the test on a transport error.
func runCode(t *testing.T, d *testdaemon.Daemon, id string, req client.CodeExecuteRequest) client.CodeExecution {
	t.Helper()
	x, err := d.C.RunCode(t.Context(), id, req)
	if err != nil {
		t.Fatalf("run %q: %v", req.Code, err)
	}
	return x
}

// codeOK runs code that must not fail and returns its main result's text.
func codeOK(t *testing.T, d *testdaemon.Daemon, id string, req client.CodeExecuteRequest) client.CodeExecution {
	t.Helper()
	x := runCode(t, d, id, req)
	if x.Error != nil {
		t.Fatalf("run %q: %s: %s\n%s", req.Code, x.Error.Name, x.Error.Value, x.Error.Traceback)
	}
	return x
}

// TestCodeInterpreter drives the code interpreter of one hotcell/code
// sandbox through the Go SDK: Python state, rich results (a pandas table
// as HTML, a matplotlib figure as PNG without savefig), errors, output
// order, timeouts that keep state, a crashed kernel, isolated contexts,
// and JavaScript and Bash contexts.
func TestCodeInterpreter(t *testing.T) {
	t.Parallel()
	img := testenv.CodeImage(t)
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: img})
	id := sb.ID

	t.Run("state", func(t *testing.T) {
		ctx, err := d.C.CreateCodeContext(t.Context(), id, client.CodeContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		first := codeOK(t, d, id, client.CodeExecuteRequest{Code: "x = 41", ContextID: ctx.ID})
		x := codeOK(t, d, id, client.CodeExecuteRequest{Code: "x + 1", ContextID: ctx.ID})
		if x.Text() != "42" {
			t.Errorf("x + 1 = %q, want 42", x.Text())
		}
		if x.ExecutionCount != first.ExecutionCount+1 || first.ExecutionCount < 1 {
			t.Errorf("execution counts %d then %d, want n then n+1", first.ExecutionCount, x.ExecutionCount)
		}
	})

	t.Run("default context", func(t *testing.T) {
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "dflt = 'kept'"})
		if got := codeOK(t, d, id, client.CodeExecuteRequest{Code: "dflt", Language: "python"}).Text(); got != "'kept'" {
			t.Errorf("default python context: dflt = %s, want 'kept'", got)
		}
	})

	t.Run("dataframe html", func(t *testing.T) {
		x := codeOK(t, d, id, client.CodeExecuteRequest{Code: "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3, 19]})"})
		if len(x.Results) != 1 || !x.Results[0].IsMainResult {
			t.Fatalf("results %+v, want one main result", x.Results)
		}
		r := x.Results[0]
		if !strings.Contains(r.HTML, "<table") || !strings.Contains(r.HTML, "Lima") || !strings.Contains(r.Text, "Oslo") {
			t.Errorf("DataFrame result html %q text %q, want a table with the rows", r.HTML, r.Text)
		}
	})

	t.Run("matplotlib png", func(t *testing.T) {
		x := codeOK(t, d, id, client.CodeExecuteRequest{Code: "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])\nplt.title('hotcell')"})
		var pngs []string
		for _, r := range x.Results {
			if r.PNG != "" {
				pngs = append(pngs, r.PNG)
			}
		}
		if len(pngs) != 1 {
			t.Fatalf("got %d PNG results in %+v, want 1 (the figure, without savefig)", len(pngs), x.Results)
		}
		data, err := base64.StdEncoding.DecodeString(pngs[0])
		if err != nil {
			t.Fatalf("png is not base64: %v", err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("png does not decode: %v", err)
		}
		// 4x3 inches at 100 dpi, trimmed to the drawing by the inline
		// backend's tight bounding box.
		if cfg.Width < 250 || cfg.Width > 420 || cfg.Height < 180 || cfg.Height > 320 {
			t.Errorf("figure is %dx%d, want about 400x300", cfg.Width, cfg.Height)
		}
		if _, err := png.Decode(bytes.NewReader(data)); err != nil {
			t.Errorf("png pixels do not decode: %v", err)
		}
	})

	t.Run("traceback", func(t *testing.T) {
		x := runCode(t, d, id, client.CodeExecuteRequest{Code: "def f():\n    return 1 / 0\nf()"})
		if x.Error == nil || x.Error.Name != "ZeroDivisionError" || x.Error.Value != "division by zero" {
			t.Fatalf("error %+v, want ZeroDivisionError: division by zero", x.Error)
		}
		// IPython colours its tracebacks, as on E2B.
		if plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(x.Error.Traceback, ""); !strings.Contains(plain, "return 1 / 0") {
			t.Errorf("traceback %q does not show the failing line", plain)
		}
	})

	t.Run("output order", func(t *testing.T) {
		st, err := d.C.RunCodeStream(t.Context(), id, client.CodeExecuteRequest{
			Code: "import sys\nfor i in range(3):\n    print(f'out{i}', flush=True)\n    print(f'err{i}', file=sys.stderr, flush=True)\n'done'"})
		if err != nil {
			t.Fatal(err)
		}
		var seq []string
		for {
			ev, err := st.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Type {
			case client.CodeEventStdout, client.CodeEventStderr:
				seq = append(seq, ev.Type+":"+strings.TrimSpace(ev.Text))
			case client.CodeEventResult:
				seq = append(seq, "result:"+ev.Result.Text)
			}
		}
		want := "stdout:out0 stderr:err0 stdout:out1 stderr:err1 stdout:out2 stderr:err2 result:'done'"
		if got := strings.Join(seq, " "); got != want {
			t.Errorf("events %s, want %s", got, want)
		}
	})

	t.Run("timeout keeps state", func(t *testing.T) {
		ctx, err := d.C.CreateCodeContext(t.Context(), id, client.CodeContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "kept = 'yes'", ContextID: ctx.ID})
		x := runCode(t, d, id, client.CodeExecuteRequest{Code: "import time\nprint('started', flush=True)\ntime.sleep(60)", ContextID: ctx.ID, TimeoutMs: 1000})
		if x.Error == nil || x.Error.Name != client.CodeErrorTimeout {
			t.Fatalf("error %+v, want %s", x.Error, client.CodeErrorTimeout)
		}
		if strings.Join(x.Logs.Stdout, "") != "started\n" {
			t.Errorf("stdout %q, want the output before the interrupt", x.Logs.Stdout)
		}
		if got := codeOK(t, d, id, client.CodeExecuteRequest{Code: "kept", ContextID: ctx.ID}).Text(); got != "'yes'" {
			t.Errorf("after the timeout kept = %s, want 'yes'", got)
		}
	})

	t.Run("kernel crash", func(t *testing.T) {
		ctx, err := d.C.CreateCodeContext(t.Context(), id, client.CodeContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "lost = 1", ContextID: ctx.ID})
		x := runCode(t, d, id, client.CodeExecuteRequest{Code: "import os\nos._exit(1)", ContextID: ctx.ID})
		if x.Error == nil || x.Error.Name != client.CodeErrorKernelDied || !strings.Contains(x.Error.Value, "exit code 1") {
			t.Fatalf("error %+v, want %s with exit code 1", x.Error, client.CodeErrorKernelDied)
		}
		next := codeOK(t, d, id, client.CodeExecuteRequest{Code: "'lost' in globals(), 6 * 7", ContextID: ctx.ID})
		if next.Text() != "(False, 42)" {
			t.Errorf("after the crash: %s, want (False, 42) from a new kernel", next.Text())
		}
		if !strings.Contains(strings.Join(next.Logs.Stderr, ""), "started a new one") {
			t.Errorf("stderr %q does not say the interpreter was restarted", next.Logs.Stderr)
		}
	})

	t.Run("contexts isolated", func(t *testing.T) {
		a, err := d.C.CreateCodeContext(t.Context(), id, client.CodeContextRequest{Cwd: "/tmp", Envs: map[string]string{"WHO": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := d.C.CreateCodeContext(t.Context(), id, client.CodeContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "secret = 'a'", ContextID: a.ID})
		x := runCode(t, d, id, client.CodeExecuteRequest{Code: "secret", ContextID: b.ID})
		if x.Error == nil || x.Error.Name != "NameError" {
			t.Errorf("context b sees a's variable: %+v %+v", x.Results, x.Error)
		}
		if got := codeOK(t, d, id, client.CodeExecuteRequest{Code: "import os\nos.getcwd(), os.environ.get('WHO'), os.environ.get('ONCE')", ContextID: a.ID,
			Envs: map[string]string{"ONCE": "1"}}).Text(); got != "('/tmp', 'a', '1')" {
			t.Errorf("context a: cwd, WHO, ONCE = %s, want ('/tmp', 'a', '1')", got)
		}
		if got := codeOK(t, d, id, client.CodeExecuteRequest{Code: "os.environ.get('ONCE')", ContextID: a.ID}).Text(); got != "" {
			t.Errorf("an execution's envs outlived it: ONCE = %s", got)
		}
		list, err := d.C.ListCodeContexts(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range list {
			seen[c.ID] = true
		}
		if !seen[a.ID] || !seen[b.ID] {
			t.Errorf("list %+v lacks %s or %s", list, a.ID, b.ID)
		}
		if err := d.C.RestartCodeContext(t.Context(), id, a.ID); err != nil {
			t.Fatal(err)
		}
		if x := runCode(t, d, id, client.CodeExecuteRequest{Code: "secret", ContextID: a.ID}); x.Error == nil || x.Error.Name != "NameError" {
			t.Errorf("restart kept the state: %+v", x)
		}
		if err := d.C.DeleteCodeContext(t.Context(), id, b.ID); err != nil {
			t.Fatal(err)
		}
		_, err = d.C.RunCode(t.Context(), id, client.CodeExecuteRequest{Code: "1", ContextID: b.ID})
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("run in a deleted context: %v, want not found", err)
		}
	})

	t.Run("javascript", func(t *testing.T) {
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "let n = 2; function twice(v) { return 2 * v }", Language: "javascript"})
		x := codeOK(t, d, id, client.CodeExecuteRequest{Code: "console.log('n is', n); twice(n * 10 + 1)", Language: "javascript"})
		if x.Text() != "42" || strings.Join(x.Logs.Stdout, "") != "n is 2\n" {
			t.Errorf("javascript: result %q stdout %q, want 42 and the log line", x.Text(), x.Logs.Stdout)
		}
		y := runCode(t, d, id, client.CodeExecuteRequest{Code: "null.boom", Language: "javascript"})
		if y.Error == nil || y.Error.Name != "TypeError" {
			t.Errorf("javascript error %+v, want TypeError", y.Error)
		}
	})

	t.Run("bash", func(t *testing.T) {
		codeOK(t, d, id, client.CodeExecuteRequest{Code: "cd /tmp && export Q=7 && f() { echo \"f:$1\"; }", Language: "bash"})
		x := codeOK(t, d, id, client.CodeExecuteRequest{Code: "pwd; echo $Q; f x; echo oops >&2", Language: "bash"})
		if got := strings.Join(x.Logs.Stdout, ""); got != "/tmp\n7\nf:x\n" {
			t.Errorf("bash stdout %q, want the cwd, the variable and the function kept", got)
		}
		if got := strings.Join(x.Logs.Stderr, ""); got != "oops\n" {
			t.Errorf("bash stderr %q, want oops", got)
		}
		y := runCode(t, d, id, client.CodeExecuteRequest{Code: "false", Language: "bash"})
		if y.Error == nil || y.Error.Name != "ExitError" {
			t.Errorf("bash false: error %+v, want ExitError", y.Error)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, req := range []client.CodeExecuteRequest{
			{Code: "1", Language: "cobol"},
			{Code: "1", Language: "python", ContextID: "abc"},
			{Code: "1", Envs: map[string]string{"1X": "y"}},
			{Code: "1", ContextID: "../x"},
			{Code: "1", TimeoutMs: -1},
		} {
			_, err := d.C.RunCode(t.Context(), id, req)
			if !errors.Is(err, client.ErrInvalidArgument) {
				t.Errorf("%+v: %v, want invalid argument", req, err)
			}
		}
	})
}

// TestCodeNeedsCodeImage: a sandbox of another image answers a clear 409
// naming the image to use.
func TestCodeNeedsCodeImage(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	_, err := d.C.RunCode(t.Context(), sb.ID, client.CodeExecuteRequest{Code: "1"})
	if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "hotcell/code") {
		t.Errorf("run code in hotcell/base: %v, want a conflict naming hotcell/code", err)
	}
}

// TestCodeContextSurvivesDaemonRestart: the contexts live in the sandbox,
// so a daemon restart keeps their state.
func TestCodeContextSurvivesDaemonRestart(t *testing.T) {
	t.Parallel()
	img := testenv.CodeImage(t)
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: img})
	ctx, err := d.C.CreateCodeContext(t.Context(), sb.ID, client.CodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	codeOK(t, d, sb.ID, client.CodeExecuteRequest{Code: "import numpy as np\nm = np.arange(6).reshape(2, 3)", ContextID: ctx.ID})
	codeOK(t, d, sb.ID, client.CodeExecuteRequest{Code: "greeting=hello", Language: "bash"})
	d.Restart()
	if got := codeOK(t, d, sb.ID, client.CodeExecuteRequest{Code: "int(m.sum())", ContextID: ctx.ID}).Text(); got != "15" {
		t.Errorf("after the restart m.sum() = %s, want 15", got)
	}
	if got := strings.Join(codeOK(t, d, sb.ID, client.CodeExecuteRequest{Code: "echo $greeting", Language: "bash"}).Logs.Stdout, ""); got != "hello\n" {
		t.Errorf("after the restart the default bash context printed %q, want hello", got)
	}
}

// TestMCPRunCode: the MCP tool run_code over the daemon's /v1/mcp keeps
// state between calls and returns a matplotlib chart as MCP image content.
func TestMCPRunCode(t *testing.T) {
	t.Parallel()
	img := testenv.CodeImage(t)
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: img})
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + d.Addr + "/v1/mcp", HTTPClient: &http.Client{Transport: bearerTransport{daemonToken(t, d)}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect to /v1/mcp: %v", err)
	}
	defer cs.Close()

	var out struct {
		Results []struct {
			IsMainResult bool     `json:"isMainResult"`
			Formats      []string `json:"formats"`
			Text         string   `json:"text"`
		} `json:"results"`
		Stdout string `json:"stdout"`
		Error  *struct {
			Name      string `json:"name"`
			Traceback string `json:"traceback"`
		} `json:"error"`
		Images int `json:"images"`
	}
	mcpCall(t, cs, "run_code", map[string]any{"sandboxId": sb.ID, "code": "import matplotlib.pyplot as plt\nvals = [3, 1, 2]\nprint('plotting')"}, &out)
	if out.Stdout != "plotting\n" || out.Error != nil {
		t.Fatalf("first cell: %+v", out)
	}
	res := mcpCallRaw(t, cs, "run_code", map[string]any{"sandboxId": sb.ID, "code": "plt.bar(range(3), vals)\nsum(vals)"})
	if res.IsError {
		t.Fatalf("run_code: %s", mcpText(res))
	}
	var images []*mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			images = append(images, ic)
		}
	}
	if len(images) != 1 || images[0].MIMEType != "image/png" {
		t.Fatalf("content %v, want one PNG image", res.Content)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(images[0].Data))
	if err != nil || cfg.Width < 100 || cfg.Height < 100 {
		t.Errorf("image content: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
	if !strings.Contains(mcpText(res), "result (text):\n6") {
		t.Errorf("summary %q lacks the value 6 computed from the first cell's vals", mcpText(res))
	}
	mcpCall(t, cs, "run_code", map[string]any{"sandboxId": sb.ID, "code": "undefined_name"}, &out)
	if out.Error == nil || out.Error.Name != "NameError" || strings.Contains(out.Error.Traceback, "\x1b[") {
		t.Errorf("error %+v, want NameError with a plain traceback", out.Error)
	}
}

// TestCodeCLI: hotcell code runs cells with -c, -f and stdin, prints the
// value, the traceback (exit 1) and saves figures with --save-images.
func TestCodeCLI(t *testing.T) {
	t.Parallel()
	img := testenv.CodeImage(t)
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: img})
	c := newCLI(t, d)
	c.want(0, "code", sb.ID, "-c", "v = 20")
	if r := c.want(0, "code", sb.ID, "-c", "print('hi')\nv * 2 + 2"); r.stdout != "hi\n42\n" {
		t.Errorf("stdout %q, want hi and 42", r.stdout)
	}
	r := c.run("code", sb.ID, "-c", "1/0")
	if r.code != 1 || !strings.Contains(r.stderr, "ZeroDivisionError") {
		t.Errorf("1/0: exit %d, stderr %q; want 1 and the traceback", r.code, r.stderr)
	}
	if r := c.runIn("echo from-stdin $((40 + 2))\n", "code", sb.ID, "--language", "bash"); r.code != 0 || r.stdout != "from-stdin 42\n" {
		t.Errorf("bash cell from stdin: %+v", r)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "plot.py")
	if err := os.WriteFile(file, []byte("import matplotlib.pyplot as plt\nplt.plot([v, 1, v])\nplt.show()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images")
	r = c.want(0, "code", sb.ID, "-f", file, "--save-images", out)
	data, err := os.ReadFile(filepath.Join(out, "result-1.png"))
	if err != nil {
		t.Fatalf("no image saved (stdout %q): %v", r.stdout, err)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(data)); err != nil || !strings.Contains(r.stdout, "saved to") {
		t.Errorf("saved image: %v; stdout %q", err, r.stdout)
	}
	var x client.CodeExecution
	r = c.want(0, "code", sb.ID, "--json", "-c", "{'a': v}")
	if err := json.Unmarshal([]byte(r.stdout), &x); err != nil || x.Text() != "{'a': 20}" {
		t.Errorf("--json: %v, %+v", err, x)
	}
}
