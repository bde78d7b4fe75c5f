package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/client"
)

const token = "hc_test"

// fakeAPI is an in-memory stand-in for the daemon's API: enough of it to
// test the CLI's argument handling, requests and output.
type fakeAPI struct {
	t  *testing.T
	mu sync.Mutex
	// requests records "METHOD URI" of every call.
	requests []string
	bodies   map[string][]byte // last request body per path
	// files of sandbox "sb1": path → content; dirs → true.
	files map[string][]byte
	dirs  map[string]bool
	// archive is what GET archive answers, built by a test.
	archive []byte
	// execLines is what an exec stream answers.
	execLines []string
}

func newFake(t *testing.T) (*fakeAPI, string) {
	f := &fakeAPI{t: t, bodies: map[string][]byte{}, files: map[string][]byte{}, dirs: map[string]bool{"/": true, "/workspace": true}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func jsonReply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func errReply(w http.ResponseWriter, status int, code, msg string) {
	jsonReply(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func resolve(p string) string {
	if !path.IsAbs(p) {
		p = path.Join("/workspace", p)
	}
	return path.Clean(p)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	f.bodies[r.URL.Path] = body
	if r.Header.Get("Authorization") != "Bearer "+token {
		errReply(w, 401, "unauthenticated", "missing or wrong token")
		return
	}
	q := r.URL.Query()
	p := resolve(q.Get("path"))
	created := time.Now().Add(-3 * time.Minute)
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
		jsonReply(w, 201, client.Sandbox{ID: "sb1", State: client.StateRunning, Image: "img", CreatedAt: created})
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes":
		jsonReply(w, 200, client.SandboxList{Sandboxes: []client.Sandbox{
			{ID: "sb1", State: client.StateRunning, Image: "hotcell/base:latest", Runtime: client.RuntimeGVisor, CreatedAt: created, Labels: map[string]string{"b": "2", "a": "1"}},
			{ID: "sb2", State: client.StateStopped, Image: "x", Runtime: client.RuntimeRunc, CreatedAt: created.Add(-2 * time.Hour)},
		}})
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1":
		jsonReply(w, 200, client.Sandbox{ID: "sb1", State: client.StateRunning, Image: "img", CreatedAt: created,
			Env: map[string]string{"SECRET": "v"}, Limits: client.Limits{MemoryMB: 512}})
	case r.Method == "GET" && r.URL.Path == "/v1/host":
		jsonReply(w, 200, client.HostInfo{Version: "v9", Driver: "docker", EngineVersion: "20.10", Runtimes: []string{"runc", "gvisor"}, DefaultRuntime: "runc"})
	case r.Method == "DELETE" && r.URL.Path == "/v1/sandboxes/sb1":
		w.WriteHeader(204)
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes/sb1/exec":
		if q.Get("stream") != "true" {
			jsonReply(w, 200, client.ExecResult{Stdout: "out", ExitCode: 4})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range f.execLines {
			io.WriteString(w, l+"\n")
		}
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/fs/stat":
		switch {
		case f.dirs[p]:
			jsonReply(w, 200, client.FileInfo{Name: path.Base(p), Path: p, Type: client.FileTypeDir, Mode: 0o755})
		case f.files[p] != nil:
			jsonReply(w, 200, client.FileInfo{Name: path.Base(p), Path: p, Type: client.FileTypeFile, Mode: 0o640, Size: int64(len(f.files[p]))})
		default:
			errReply(w, 404, "not_found", p+": not found")
		}
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/files":
		w.Write(f.files[p])
	case r.Method == "PUT" && r.URL.Path == "/v1/sandboxes/sb1/files":
		f.files[p] = body
		jsonReply(w, 200, client.WriteResult{Path: p, Size: int64(len(body))})
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes/sb1/fs/mkdir":
		var req client.MkdirRequest
		json.Unmarshal(body, &req)
		f.dirs[resolve(req.Path)] = true
		jsonReply(w, 200, client.FileInfo{Path: resolve(req.Path), Type: client.FileTypeDir})
	case r.Method == "PUT" && r.URL.Path == "/v1/sandboxes/sb1/archive":
		tr := tar.NewReader(bytes.NewReader(body))
		n := 0
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			data, _ := io.ReadAll(tr)
			if hdr.Typeflag == tar.TypeDir {
				f.dirs[path.Join(p, hdr.Name)] = true
			} else {
				f.files[path.Join(p, hdr.Name)] = data
			}
			n++
		}
		jsonReply(w, 200, client.ArchiveResult{Files: int64(n)})
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb1/archive":
		w.Write(f.archive)
	default:
		errReply(w, 404, "not_found", "sandbox "+r.URL.Path+": not found")
	}
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] })
	return result{code, stdout.String(), stderr.String()}
}

func envFor(url string) map[string]string {
	return map[string]string{"HOTCELL_URL": url, "HOTCELL_TOKEN": token}
}

func TestCreate(t *testing.T) {
	f, url := newFake(t)
	res := runCLI(t, envFor(url), "create", "--image", "img", "--env", "A=1", "-e", "B=x=y", "--label", "k=v",
		"--memory", "512", "--cpus", "1.5", "--pids", "64", "--no-persist", "--repo", "https://r.invalid/x.git", "--ref", "main",
		"--setup", "make", "--setup", "make test", "--runtime", "gvisor")
	if res.code != 0 || res.stdout != "sb1\n" {
		t.Fatalf("got %+v, want exit 0 and the id", res)
	}
	var got, want any
	json.Unmarshal(f.bodies["/v1/sandboxes"], &got)
	json.Unmarshal([]byte(`{"image":"img","env":{"A":"1","B":"x=y"},"labels":{"k":"v"},"limits":{"memoryMb":512,"cpus":1.5,"pidsLimit":64},
		"persist":false,"repo":{"url":"https://r.invalid/x.git","ref":"main"},"setup":["make","make test"],"runtime":"gvisor"}`), &want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request body (-want +got):\n%s", d)
	}

	res = runCLI(t, envFor(url), "create", "--json")
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(res.stdout), &sb); err != nil || sb.ID != "sb1" {
		t.Errorf("--json: got %q (%v), want the sandbox as JSON", res.stdout, err)
	}
}

func TestLs(t *testing.T) {
	f, url := newFake(t)
	res := runCLI(t, envFor(url), "ls", "--state", "running", "-l", "a=1")
	if res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	if got, want := f.requests[0], "GET /v1/sandboxes?label=a%3D1&state=running"; got != want {
		t.Errorf("request: got %q, want %q", got, want)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), res.stdout)
	}
	for i, want := range [][]string{
		{"ID", "STATE", "IMAGE", "RUNTIME", "CREATED", "LABELS"},
		{"sb1", "running", "hotcell/base:latest", "gvisor", "3", "minutes", "ago", "a=1,b=2"},
		{"sb2", "stopped", "x", "runc", "2", "hours", "ago"},
	} {
		if d := cmp.Diff(want, strings.Fields(lines[i])); d != "" {
			t.Errorf("line %d (-want +got):\n%s", i, d)
		}
	}
	if res := runCLI(t, envFor(url), "ls", "-q"); res.stdout != "sb1\nsb2\n" {
		t.Errorf("-q: got %q, want the ids", res.stdout)
	}
	res = runCLI(t, envFor(url), "ls", "--json")
	var list client.SandboxList
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list.Sandboxes) != 2 {
		t.Errorf("--json: got %q (%v)", res.stdout, err)
	}
}

func TestVersionShowsRuntimes(t *testing.T) {
	_, url := newFake(t)
	res := runCLI(t, envFor(url), "version")
	if res.code != 0 || !strings.Contains(res.stdout, "server: v9") || !strings.Contains(res.stdout, "runtimes: runc, gvisor (default runc)\n") {
		t.Errorf("got %+v, want the server's version and its runtimes", res)
	}
}

func TestInspectHidesEnvValues(t *testing.T) {
	_, url := newFake(t)
	res := runCLI(t, envFor(url), "inspect", "sb1")
	if res.code != 0 || !strings.Contains(res.stdout, "SECRET") || strings.Contains(res.stdout, "SECRET=v") || !strings.Contains(res.stdout, "memory 512 MB") {
		t.Errorf("got %+v, want env keys without values and the limits", res)
	}
}

func TestExec(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		lines      []string
		wantCode   int
		wantStdout string
		wantStderr string
		wantBody   string
	}{
		{
			name: "argv after dash dash, binary output, exit code",
			args: []string{"exec", "sb1", "--cwd", "/tmp", "-e", "A=1", "--timeout", "2s", "--", "ls", "-la", "a b"},
			lines: []string{`{"type":"stdout","data":"AAH/"}`, `{"type":"keepalive"}`, `{"type":"stderr","data":"ZXJy"}`,
				`{"type":"exit","exitCode":3}`},
			wantCode: 3, wantStdout: "\x00\x01\xff", wantStderr: "err",
			wantBody: `{"argv":["ls","-la","a b"],"env":{"A":"1"},"cwd":"/tmp","timeoutMs":2000}`,
		},
		{
			name:     "shell command",
			args:     []string{"exec", "sb1", "-c", "echo hi | wc -c"},
			lines:    []string{`{"type":"stdout","data":"Mwo="}`, `{"type":"exit","exitCode":0}`},
			wantCode: 0, wantStdout: "3\n",
			wantBody: `{"command":"echo hi | wc -c"}`,
		},
		{
			name:     "timed out",
			args:     []string{"exec", "sb1", "--", "sleep", "9"},
			lines:    []string{`{"type":"exit","exitCode":137,"signal":"SIGKILL","timedOut":true,"durationMs":1000}`},
			wantCode: 137, wantStderr: "hotcell: command timed out after 1s and was killed\n",
			wantBody: `{"argv":["sleep","9"]}`,
		},
		{
			name:     "stream error",
			args:     []string{"exec", "sb1", "--", "x"},
			lines:    []string{`{"type":"stream.error","error":{"code":"unavailable","message":"agent lost"}}`},
			wantCode: 1, wantStderr: "hotcell: exec in sandbox sb1: agent lost\n",
			wantBody: `{"argv":["x"]}`,
		},
		{
			name:     "both -c and argv",
			args:     []string{"exec", "sb1", "-c", "x", "--", "y"},
			wantCode: 2,
		},
		{
			name:     "no command",
			args:     []string{"exec", "sb1"},
			wantCode: 2,
		},
		{
			name:     "buffered json",
			args:     []string{"exec", "--json", "sb1", "--", "x"},
			wantCode: 4, wantStdout: "{\n  \"stdout\": \"out\",\n  \"stderr\": \"\",\n  \"exitCode\": 4,\n  \"durationMs\": 0,\n  \"timedOut\": false,\n  \"truncated\": false\n}\n",
			wantBody: `{"argv":["x"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, url := newFake(t)
			f.execLines = tt.lines
			res := runCLI(t, envFor(url), tt.args...)
			if res.code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", res.code, tt.wantCode, res.stderr)
			}
			if tt.wantCode == 2 {
				if len(f.requests) != 0 {
					t.Errorf("got requests %v, want none for a usage error", f.requests)
				}
				return
			}
			if res.stdout != tt.wantStdout || res.stderr != tt.wantStderr {
				t.Errorf("got stdout %q stderr %q, want %q %q", res.stdout, res.stderr, tt.wantStdout, tt.wantStderr)
			}
			if got := string(f.bodies["/v1/sandboxes/sb1/exec"]); strings.TrimSpace(got) != tt.wantBody {
				t.Errorf("body: got %s, want %s", got, tt.wantBody)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	_, url := newFake(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("wrong\n"), 0o600)
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		want     string // in stderr
	}{
		{"refused token from file", map[string]string{"HOTCELL_URL": url, "HOTCELL_DATA_DIR": dir}, []string{"ls"}, 1,
			"the token was refused: check HOTCELL_TOKEN or " + filepath.Join(dir, "token")},
		{"refused token from flag", map[string]string{"HOTCELL_URL": url}, []string{"ls", "--token", "nope"}, 1,
			"the token was refused: check --token"},
		{"not found", envFor(url), []string{"inspect", "sb9"}, 1, "get sandbox sb9: sandbox /v1/sandboxes/sb9: not found"},
		{"unreachable", map[string]string{"HOTCELL_URL": "http://127.0.0.1:1", "HOTCELL_TOKEN": "x"}, []string{"ls"}, 1,
			"cannot reach the hotcell daemon at http://127.0.0.1:1 (connect: connection refused): start it with `hotcell serve`"},
		{"unknown command", nil, []string{"exce"}, 2, "Did you mean this?\n\texec"},
		{"unknown flag", nil, []string{"ls", "--nope"}, 2, "unknown flag: --nope"},
		{"missing argument", nil, []string{"inspect"}, 2, "expected one sandbox ID"},
		{"bad label", envFor(url), []string{"ls", "--label", "nokey"}, 2, `--label "nokey": want KEY=VALUE`},
		{"two local paths", envFor(url), []string{"cp", "a", "b"}, 2, "one of SRC and DST must be in a sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, tt.env, tt.args...)
			if res.code != tt.wantCode || !strings.Contains(res.stderr, tt.want) {
				t.Errorf("got exit %d stderr %q, want %d and %q", res.code, res.stderr, tt.wantCode, tt.want)
			}
			if strings.Contains(res.stderr, "Usage:") {
				t.Errorf("stderr has the whole usage text, want a pointer to --help:\n%s", res.stderr)
			}
		})
	}
}

func TestRmContinuesAfterFailure(t *testing.T) {
	_, url := newFake(t)
	res := runCLI(t, envFor(url), "rm", "sb9", "sb1")
	if res.code != 1 || res.stdout != "sb1\n" || !strings.Contains(res.stderr, "1 of 2 failed") {
		t.Errorf("got %+v, want sb1 removed and a failure for sb9", res)
	}
}

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]location{
		"sb1:/a/b":   {"sb1", "/a/b"},
		"sb1:rel":    {"sb1", "rel"},
		"./a:b":      {"", "./a:b"},
		"/x/y:z":     {"", "/x/y:z"},
		"plain":      {"", "plain"},
		":leading":   {"", ":leading"},
		"sb1:":       {"sb1", ""},
		"sb1:a:b/c:": {"sb1", "a:b/c:"},
	} {
		if got := parseLocation(in); got != want {
			t.Errorf("parseLocation(%q): got %+v, want %+v", in, got, want)
		}
	}
}

func TestCpUpload(t *testing.T) {
	f, url := newFake(t)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o755)
	os.MkdirAll(filepath.Join(src, "proj", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "proj", "sub", "x.txt"), []byte("x"), 0o644)
	os.Symlink("sub/x.txt", filepath.Join(src, "proj", "link"))

	// A file into an existing directory keeps its name.
	if res := runCLI(t, envFor(url), "cp", filepath.Join(src, "main.go"), "sb1:/workspace"); res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	if got := string(f.files["/workspace/main.go"]); got != "package main\n" {
		t.Errorf("uploaded file: got %q", got)
	}
	if got, want := f.requests[len(f.requests)-1], "PUT /v1/sandboxes/sb1/files?mode=0755&path=%2Fworkspace%2Fmain.go"; got != want {
		t.Errorf("request: got %q, want %q", got, want)
	}

	// A directory to a new name is created and filled from a tar.
	if res := runCLI(t, envFor(url), "cp", filepath.Join(src, "proj"), "sb1:dest"); res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	if !f.dirs["/workspace/dest"] || !f.dirs["/workspace/dest/sub"] || string(f.files["/workspace/dest/sub/x.txt"]) != "x" {
		t.Errorf("uploaded dir: got dirs %v files %v", f.dirs, f.files)
	}
	if _, ok := f.files["/workspace/dest/link"]; !ok {
		t.Errorf("symlink not archived: %v", f.files)
	}

	// A directory onto an existing file is refused before anything is sent.
	n := len(f.requests)
	res := runCLI(t, envFor(url), "cp", filepath.Join(src, "proj"), "sb1:/workspace/main.go")
	if res.code != 1 || !strings.Contains(res.stderr, "cannot overwrite non-directory sb1:/workspace/main.go with a directory") {
		t.Errorf("got %+v, want a refusal", res)
	}
	for _, r := range f.requests[n:] {
		if !strings.HasPrefix(r, "GET ") {
			t.Errorf("got %s after a refusal, want only reads", r)
		}
	}
}

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname = ""
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestCpDownload(t *testing.T) {
	f, url := newFake(t)
	f.files["/workspace/a.txt"] = []byte("hello")
	f.dirs["/workspace/out"] = true
	dst := t.TempDir()

	// A file to a new name, with the sandbox's mode.
	if res := runCLI(t, envFor(url), "cp", "sb1:a.txt", filepath.Join(dst, "b.txt")); res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "b.txt")); string(data) != "hello" {
		t.Errorf("got %q, want hello", data)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "b.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: got %v, want 0640", fi.Mode().Perm())
	}

	// A directory into an existing directory lands under its own name.
	// Regular files use Linkname in tarOf as their content.
	f.archive = tarOf(t,
		tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "sub/f", Typeflag: tar.TypeReg, Mode: 0o4755, Linkname: "data"},
		tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "sub/f"},
		tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "sub/f"},
	)
	if res := runCLI(t, envFor(url), "cp", "sb1:out", dst); res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "out", "l")); string(data) != "data" {
		t.Errorf("through symlink: got %q, want data", data)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "out", "h")); string(data) != "data" {
		t.Errorf("hard link: got %q, want data", data)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "out", "sub", "f")); fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("setuid bit kept: %v", fi.Mode())
	}

	// A file onto an existing directory is refused.
	os.Mkdir(filepath.Join(dst, "a.txt"), 0o755)
	res := runCLI(t, envFor(url), "cp", "sb1:a.txt", dst)
	if res.code != 1 || !strings.Contains(res.stderr, "cannot overwrite directory") {
		t.Errorf("got %+v, want a refusal", res)
	}
}

func TestCpDownloadRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"dot dot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Linkname: "x"}}},
		{"absolute", []tar.Header{{Name: "/evil", Typeflag: tar.TypeReg, Linkname: "x"}}},
		{"through a symlink", []tar.Header{
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: ".."},
			{Name: "up/evil", Typeflag: tar.TypeReg, Linkname: "x"},
		}},
		{"through an absolute symlink", []tar.Header{
			{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "PARENT"},
			{Name: "abs/evil", Typeflag: tar.TypeReg, Linkname: "x"},
		}},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../secret"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, url := newFake(t)
			f.dirs["/workspace/out"] = true
			parent := t.TempDir()
			os.WriteFile(filepath.Join(parent, "secret"), []byte("s"), 0o600)
			dst := filepath.Join(parent, "dst")
			for i := range tt.entries {
				tt.entries[i].Linkname = strings.ReplaceAll(tt.entries[i].Linkname, "PARENT", parent)
			}
			f.archive = tarOf(t, tt.entries...)
			res := runCLI(t, envFor(url), "cp", "sb1:out", dst)
			t.Log(res.stderr)
			if res.code != 1 {
				t.Errorf("got %+v, want a failure", res)
			}
			if _, err := os.Lstat(filepath.Join(parent, "evil")); err == nil {
				t.Error("an entry escaped the destination")
			}
		})
	}
}
