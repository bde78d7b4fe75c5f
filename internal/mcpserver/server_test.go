package mcpserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/clientconfig"
	"github.com/hotcell/hotcell/internal/wire"
)

// connect runs the server against an API served by h and returns an MCP
// client session to it, over the SDK's in-memory transport.
func connect(t *testing.T, h http.Handler) *mcp.ClientSession {
	t.Helper()
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	return connectTo(t, api.URL)
}

func connectTo(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c, err := client.New(url, "tok")
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	srv := New(c, Options{Settings: &clientconfig.Settings{URL: url, URLSource: clientconfig.EnvURL, Token: "tok", TokenSource: clientconfig.EnvToken}})
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a result's structured content into out.
func structured(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	cs := connect(t, http.NotFoundHandler())
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 {
			t.Errorf("%s: description %q is too short to use without docs", tool.Name, tool.Description)
		}
		s, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                    `json:"type"`
			Properties map[string]map[string]any `json:"properties"`
			Required   []string                  `json:"required"`
		}
		if err := json.Unmarshal(s, &schema); err != nil {
			t.Fatal(err)
		}
		if schema.Type != "object" || len(schema.Properties) == 0 {
			t.Errorf("%s: input schema %s has no properties", tool.Name, s)
		}
		for name, p := range schema.Properties {
			if d, _ := p["description"].(string); d == "" {
				t.Errorf("%s: property %s has no description", tool.Name, name)
			}
		}
		if _, ok := schema.Properties["sandboxId"]; ok && !slices.Contains(schema.Required, "sandboxId") {
			t.Errorf("%s: sandboxId is not required", tool.Name)
		}
		if tool.OutputSchema == nil {
			t.Errorf("%s: no output schema", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"exec", "file_list", "file_read", "file_write", "process_list", "process_logs", "process_signal", "process_start", "run_code", "sandbox_create", "sandbox_destroy", "sandbox_list"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
}

func TestToolErrors(t *testing.T) {
	t.Parallel()
	api := http.NewServeMux()
	api.HandleFunc("/v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox \"nope\" not found"}}`))
	})
	cs := connect(t, api)

	res := call(t, cs, "exec", map[string]any{"sandboxId": "nope", "command": "true"})
	if !res.IsError || !strings.Contains(text(res), `sandbox "nope" not found`) {
		t.Errorf("got error %v %q, want the API's message", res.IsError, text(res))
	}
	// A misspelt argument is refused, not ignored.
	res = call(t, cs, "exec", map[string]any{"sandboxId": "nope", "comand": "true"})
	if !res.IsError || !strings.Contains(text(res), "comand") {
		t.Errorf("got error %v %q, want one naming the unknown property", res.IsError, text(res))
	}

	down := connectTo(t, "http://127.0.0.1:1")
	res = call(t, down, "sandbox_list", nil)
	if !res.IsError || !strings.Contains(text(res), "hotcell serve") || !strings.Contains(text(res), "at http://127.0.0.1:1") || !strings.Contains(text(res), "check HOTCELL_URL") {
		t.Errorf("got error %v %q, want advice on starting the daemon", res.IsError, text(res))
	}

	refusing := http.NewServeMux()
	refusing.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"code":"unauthenticated","message":"bad token"}}`))
	})
	res = call(t, connect(t, refusing), "sandbox_list", nil)
	if !res.IsError || !strings.Contains(text(res), "refused the token: check HOTCELL_TOKEN") {
		t.Errorf("got error %v %q, want advice naming where the token came from", res.IsError, text(res))
	}
}

func TestExecShortensOutput(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", 100_000) + "THE END"
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "true" {
			t.Errorf("exec was not streamed")
		}
		enc := json.NewEncoder(w)
		for b := []byte(big); len(b) > 0; {
			n := min(4096, len(b))
			enc.Encode(wire.ExecEvent{Type: wire.EventStdout, Data: b[:n]})
			b = b[n:]
		}
		enc.Encode(wire.ExecEvent{Type: wire.EventStderr, Data: []byte("warning\n")})
		enc.Encode(wire.ExecEvent{Type: wire.EventExit, ExitCode: 3, DurationMs: 5})
	})
	cs := connect(t, api)
	var out execOut
	structured(t, call(t, cs, "exec", map[string]any{"sandboxId": "sb", "command": "x"}), &out)
	if out.ExitCode != 3 || out.Stderr != "warning\n" || out.StdoutBytes != int64(len(big)) {
		t.Errorf("got exit %d, stderr %q, %d stdout bytes", out.ExitCode, out.Stderr, out.StdoutBytes)
	}
	omitted := len(big) - outputHead - outputTail
	if !strings.HasPrefix(out.Stdout, "aaaa") || !strings.HasSuffix(out.Stdout, "THE END") ||
		!strings.Contains(out.Stdout, "[... "+strconv.Itoa(omitted)+" bytes omitted; ") || len(out.Stdout) > outputHead+outputTail+400 {
		t.Errorf("stdout of %d bytes is not head + marker + tail: ...%q...", len(out.Stdout), out.Stdout[outputHead-10:outputHead+300])
	}
	if !strings.Contains(out.Note, "file_read") {
		t.Errorf("note %q does not say how to see everything", out.Note)
	}
}

func TestFileReadPages(t *testing.T) {
	t.Parallel()
	content := strings.Repeat("0123456789", 10_000) // 100000 bytes
	api := http.NewServeMux()
	api.HandleFunc("GET /v1/sandboxes/{id}/fs/stat", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(wire.FileInfo{Name: "f", Path: "/workspace/f", Type: wire.FileTypeFile, Size: int64(len(content)), Mode: 0o644})
	})
	api.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		n, _ := strconv.Atoi(r.URL.Query().Get("length"))
		w.Write([]byte(content[off:min(off+n, len(content))]))
	})
	cs := connect(t, api)

	var got strings.Builder
	offset := 0
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("too many pages")
		}
		var out fileReadOut
		structured(t, call(t, cs, "file_read", map[string]any{"sandboxId": "sb", "path": "f", "offset": offset}), &out)
		if out.Encoding != "text" || out.Size == nil || *out.Size != int64(len(content)) || out.Offset != int64(offset) {
			t.Fatalf("page at %d: %+v", offset, out)
		}
		got.WriteString(out.Content)
		if out.EOF {
			if out.NextOffset != nil {
				t.Errorf("last page has nextOffset %d", *out.NextOffset)
			}
			break
		}
		if out.NextOffset == nil || *out.NextOffset != int64(offset+readDefault) || !strings.Contains(out.Note, "offset "+strconv.FormatInt(*out.NextOffset, 10)) {
			t.Fatalf("page at %d: next %v, note %q", offset, out.NextOffset, out.Note)
		}
		offset = int(*out.NextOffset)
	}
	if got.String() != content {
		t.Errorf("pages joined are %d bytes, want the %d of the file", got.Len(), len(content))
	}
}

// TestCreateRuntime checks that sandbox_create passes its runtime to the
// API and shows the sandbox's, and that its schema offers only the known
// runtimes.
func TestCreateRuntime(t *testing.T) {
	t.Parallel()
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req wire.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(wire.Sandbox{ID: "sb1", State: wire.StateRunning, Runtime: req.Runtime})
	})
	cs := connect(t, api)
	var out sandboxOut
	structured(t, call(t, cs, "sandbox_create", map[string]any{"runtime": "gvisor"}), &out)
	if out.Runtime != wire.RuntimeGVisor {
		t.Errorf("sandbox_create with runtime gvisor: got runtime %q, want gvisor", out.Runtime)
	}
	if res := call(t, cs, "sandbox_create", map[string]any{"runtime": "runsc"}); !res.IsError {
		t.Errorf("sandbox_create with runtime runsc: got %s, want a tool error (not in the schema's enum)", text(res))
	}
}

// TestCreateTemplate checks that sandbox_create passes its template to the
// API and shows the template version the sandbox was made from.
func TestCreateTemplate(t *testing.T) {
	t.Parallel()
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req wire.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(wire.Sandbox{ID: "sb1", State: wire.StateRunning, Template: &wire.TemplateRef{Name: req.Template, Version: 4}})
	})
	cs := connect(t, api)
	var out sandboxOut
	structured(t, call(t, cs, "sandbox_create", map[string]any{"template": "py-data"}), &out)
	if out.Template != "py-data:4" {
		t.Errorf("sandbox_create with template py-data: got template %q, want py-data:4", out.Template)
	}
}
