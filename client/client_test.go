package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const testToken = "s3cret"

// newTestClient serves h and returns a Client for it.
func newTestClient(t *testing.T, h http.HandlerFunc, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/", testToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestRequestShapes(t *testing.T) {
	t.Parallel()
	persist := false
	tests := []struct {
		name       string
		call       func(ctx context.Context, c *Client) (any, error)
		wantMethod string
		wantURI    string
		wantBody   string // JSON, compared semantically; "" means no body
		reply      any
		status     int
		want       any
	}{
		{
			name: "create",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateSandbox(ctx, CreateSandboxRequest{
					Image: "hotcell/base:latest", Env: map[string]string{"A": "1"},
					Limits: Limits{MemoryMB: 512, CPUs: 1.5, PidsLimit: 100}, Persist: &persist,
					Repo: &Repo{URL: "https://example.invalid/r.git", Ref: "main"}, Setup: []string{"make"},
				})
			},
			wantMethod: "POST", wantURI: "/v1/sandboxes",
			wantBody: `{"image":"hotcell/base:latest","env":{"A":"1"},"limits":{"memoryMb":512,"cpus":1.5,"pidsLimit":100},"persist":false,"repo":{"url":"https://example.invalid/r.git","ref":"main"},"setup":["make"]}`,
			reply:    Sandbox{ID: "sb1", State: StateRunning}, status: 201,
			want: Sandbox{ID: "sb1", State: StateRunning},
		},
		{
			name: "list with filters",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.ListSandboxes(ctx, ListOptions{State: StateRunning, Labels: map[string]string{"team": "a", "env": "x=y"}})
			},
			wantMethod: "GET", wantURI: "/v1/sandboxes?label=env%3Dx%3Dy&label=team%3Da&state=running",
			reply: SandboxList{Sandboxes: []Sandbox{{ID: "a"}, {ID: "b"}}}, status: 200,
			want: []Sandbox{{ID: "a"}, {ID: "b"}},
		},
		{
			name:       "get escapes the id",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.GetSandbox(ctx, "a/b") },
			wantMethod: "GET", wantURI: "/v1/sandboxes/a%2Fb",
			reply: Sandbox{ID: "a/b"}, status: 200, want: Sandbox{ID: "a/b"},
		},
		{
			name:       "start",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.StartSandbox(ctx, "sb1") },
			wantMethod: "POST", wantURI: "/v1/sandboxes/sb1/start",
			reply: Sandbox{ID: "sb1"}, status: 200, want: Sandbox{ID: "sb1"},
		},
		{
			name:       "stop",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.StopSandbox(ctx, "sb1") },
			wantMethod: "POST", wantURI: "/v1/sandboxes/sb1/stop",
			reply: Sandbox{ID: "sb1"}, status: 200, want: Sandbox{ID: "sb1"},
		},
		{
			name:       "delete",
			call:       func(ctx context.Context, c *Client) (any, error) { return nil, c.DeleteSandbox(ctx, "sb1") },
			wantMethod: "DELETE", wantURI: "/v1/sandboxes/sb1", status: 204,
		},
		{
			name: "exec",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Exec(ctx, "sb1", ExecRequest{Argv: []string{"/bin/echo", "hi"}, Cwd: "/tmp", TimeoutMs: 1000})
			},
			wantMethod: "POST", wantURI: "/v1/sandboxes/sb1/exec",
			wantBody: `{"argv":["/bin/echo","hi"],"cwd":"/tmp","timeoutMs":1000}`,
			reply:    ExecResult{Stdout: "hi\n", ExitCode: 3}, status: 200,
			want: ExecResult{Stdout: "hi\n", ExitCode: 3},
		},
		{
			name:       "host",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Host(ctx) },
			wantMethod: "GET", wantURI: "/v1/host",
			reply: HostInfo{Version: "1"}, status: 200, want: HostInfo{Version: "1"},
		},
		{
			name:       "stat",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.Stat(ctx, "sb1", "a b&c") },
			wantMethod: "GET", wantURI: "/v1/sandboxes/sb1/fs/stat?path=a+b%26c",
			reply: FileInfo{Name: "a b&c", Type: FileTypeFile}, status: 200, want: FileInfo{Name: "a b&c", Type: FileTypeFile},
		},
		{
			name:       "list dir",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.ListDir(ctx, "sb1", "/workspace") },
			wantMethod: "GET", wantURI: "/v1/sandboxes/sb1/fs/list?path=%2Fworkspace",
			reply: FileList{Path: "/workspace"}, status: 200, want: FileList{Path: "/workspace"},
		},
		{
			name: "mkdir",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Mkdir(ctx, "sb1", MkdirRequest{Path: "d", Parents: true, Mode: Mode(0o700)})
			},
			wantMethod: "POST", wantURI: "/v1/sandboxes/sb1/fs/mkdir", wantBody: `{"path":"d","parents":true,"mode":"0700"}`,
			reply: FileInfo{Name: "d"}, status: 200, want: FileInfo{Name: "d"},
		},
		{
			name: "move",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.Move(ctx, "sb1", MoveRequest{From: "a", To: "b"})
			},
			wantMethod: "POST", wantURI: "/v1/sandboxes/sb1/fs/move", wantBody: `{"from":"a","to":"b"}`,
			reply: FileInfo{Name: "b"}, status: 200, want: FileInfo{Name: "b"},
		},
		{
			name:       "remove all",
			call:       func(ctx context.Context, c *Client) (any, error) { return nil, c.RemoveAll(ctx, "sb1", "d") },
			wantMethod: "DELETE", wantURI: "/v1/sandboxes/sb1/files?path=d&recursive=true", status: 204,
		},
		{
			name:       "remove file",
			call:       func(ctx context.Context, c *Client) (any, error) { return nil, c.RemoveFile(ctx, "sb1", "f") },
			wantMethod: "DELETE", wantURI: "/v1/sandboxes/sb1/files?path=f", status: 204,
		},
		{
			name: "write file with mode",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.WriteFile(ctx, "sb1", "f", strings.NewReader(`{"raw":1}`), 0o755)
			},
			wantMethod: "PUT", wantURI: "/v1/sandboxes/sb1/files?mode=0755&path=f", wantBody: `{"raw":1}`,
			reply: WriteResult{Path: "/workspace/f", Size: 9}, status: 200, want: WriteResult{Path: "/workspace/f", Size: 9},
		},
		{
			name: "put archive",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.PutArchive(ctx, "sb1", "/workspace/d", strings.NewReader(`{}`))
			},
			wantMethod: "PUT", wantURI: "/v1/sandboxes/sb1/archive?path=%2Fworkspace%2Fd", wantBody: `{}`,
			reply: ArchiveResult{Files: 2, Bytes: 10}, status: 200, want: ArchiveResult{Files: 2, Bytes: 10},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				if got, want := r.Header.Get("Authorization"), "Bearer "+testToken; got != want {
					t.Errorf("Authorization: got %q, want %q", got, want)
				}
				if r.Method != tt.wantMethod || r.RequestURI != tt.wantURI {
					t.Errorf("request: got %s %s, want %s %s", r.Method, r.RequestURI, tt.wantMethod, tt.wantURI)
				}
				body, _ := io.ReadAll(r.Body)
				if tt.wantBody == "" && len(body) != 0 {
					t.Errorf("body: got %q, want none", body)
				}
				if tt.wantBody != "" {
					var got, want any
					if json.Unmarshal(body, &got) != nil || json.Unmarshal([]byte(tt.wantBody), &want) != nil {
						t.Errorf("body: got %q, want %s", body, tt.wantBody)
					} else if d := cmp.Diff(want, got); d != "" {
						t.Errorf("body (-want +got):\n%s", d)
					}
				}
				if tt.reply == nil {
					w.WriteHeader(tt.status)
					return
				}
				writeJSON(w, tt.status, tt.reply)
			})
			got, err := tt.call(t.Context(), c)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}
}

func TestHealthSendsNoToken(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Header.Get("Authorization") != "" {
			t.Errorf("got %s with Authorization %q, want /healthz without", r.URL.Path, r.Header.Get("Authorization"))
		}
		writeJSON(w, 200, map[string]bool{"ok": true})
	})
	if err := c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestErrorDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		body       string
		wantClass  error
		wantCode   string
		wantInText string
	}{
		{"not found", 404, `{"error":{"code":"not_found","message":"sandbox \"x\": not found"}}`, ErrNotFound, "not_found", `sandbox "x": not found`},
		{"conflict", 409, `{"error":{"code":"conflict","message":"sandbox is stopped"}}`, ErrConflict, "conflict", "sandbox is stopped"},
		{"unauthenticated", 401, `{"error":{"code":"unauthenticated","message":"bad token"}}`, ErrUnauthenticated, "unauthenticated", "bad token"},
		{"not json", 502, `<html>bad gateway</html>`, nil, "internal", "HTTP 502"},
		{"not json but known status", 404, `404 page not found`, ErrNotFound, "not_found", "HTTP 404"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := c.GetSandbox(t.Context(), "x")
			if err == nil {
				t.Fatal("got no error, want one")
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("got %T %v, want an *APIError", err, err)
			}
			if apiErr.Status != tt.status || apiErr.Code != tt.wantCode {
				t.Errorf("got status %d code %q, want %d %q", apiErr.Status, apiErr.Code, tt.status, tt.wantCode)
			}
			if tt.wantClass != nil && !errors.Is(err, tt.wantClass) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tt.wantClass)
			}
			if !strings.Contains(err.Error(), tt.wantInText) || !strings.HasPrefix(err.Error(), "get sandbox x: ") {
				t.Errorf("got %q, want it to name the operation and contain %q", err, tt.wantInText)
			}
		})
	}
}

func TestResponseBound(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		fmt.Fprintf(w, `{"id":"%s"}`, strings.Repeat("x", 10000))
	})
	c.maxJSONAnswer = 1000
	_, err := c.GetSandbox(t.Context(), "x")
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

func TestEmptyID(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("got a request %s, want none", r.URL)
	})
	if _, err := c.GetSandbox(t.Context(), ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("got %v, want ErrInvalidArgument", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := New("http://"+addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Health(t.Context())
	if !IsUnreachable(err) {
		t.Errorf("IsUnreachable(%v) = false, want true", err)
	}
	if IsUnreachable(fmt.Errorf("x: %w", &APIError{Status: 503, Code: "unavailable"})) {
		t.Error("IsUnreachable(APIError) = true, want false")
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:8080", "ftp://x", "http://", "::"} {
		if _, err := New(u, ""); err == nil {
			t.Errorf("New(%q): got no error, want one", u)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("filetoken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		env       map[string]string
		wantURL   string
		wantToken string
		wantErr   bool
	}{
		{"token from env", map[string]string{"HOTCELL_TOKEN": "envtoken", "HOTCELL_DATA_DIR": dir}, DefaultURL, "envtoken", false},
		{"token from file", map[string]string{"HOTCELL_DATA_DIR": dir, "HOTCELL_URL": "http://h:1"}, "http://h:1", "filetoken", false},
		{"no token", map[string]string{"HOTCELL_DATA_DIR": filepath.Join(dir, "missing")}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := fromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr {
				if err == nil {
					t.Fatal("got no error, want one")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.URL() != tt.wantURL || c.token != tt.wantToken {
				t.Errorf("got %s %q, want %s %q", c.URL(), c.token, tt.wantURL, tt.wantToken)
			}
		})
	}
}

func TestReadFileRange(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if got, want := r.URL.RawQuery, "length=5&offset=10&path=f"; got != want {
			t.Errorf("query: got %q, want %q", got, want)
		}
		io.WriteString(w, "\x00\x01bin")
	})
	rc, err := c.ReadFile(t.Context(), "sb1", "f", &RangeOptions{Offset: 10, Length: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, _ := io.ReadAll(rc)
	if string(data) != "\x00\x01bin" {
		t.Errorf("got %q, want %q", data, "\x00\x01bin")
	}
}

// TestWriteFileStreams checks that the body reaches the server while the
// caller is still producing it: a client that buffered the whole body would
// deadlock here, since the second half is only written after the server
// confirms it received the first.
func TestWriteFileStreams(t *testing.T) {
	t.Parallel()
	gotFirst := make(chan struct{})
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != -1 {
			t.Errorf("ContentLength: got %d, want -1 (streamed)", r.ContentLength)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "first" {
			t.Errorf("first part: got %q %v, want %q", buf, err, "first")
		}
		close(gotFirst)
		rest, _ := io.ReadAll(r.Body)
		writeJSON(w, 200, WriteResult{Path: "/workspace/f", Size: int64(5 + len(rest))})
	})
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first"))
		select {
		case <-gotFirst:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("server did not get the first part while the body was open"))
			return
		}
		pw.Write([]byte("second"))
		pw.Close()
	}()
	res, err := c.WriteFile(t.Context(), "sb1", "f", pr, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != 11 {
		t.Errorf("size: got %d, want 11", res.Size)
	}
}

// ndjsonServer answers an exec stream with lines, flushing each, and then
// optionally holds the connection open until the request is cancelled.
func ndjsonServer(t *testing.T, lines []string, hold bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "true" || r.URL.Path != "/v1/sandboxes/sb1/exec" {
			t.Errorf("got %s, want an exec stream", r.URL)
		}
		// Reading the request to its end lets the server notice when the
		// client goes away, which ends r.Context() for the hold below.
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for _, l := range lines {
			io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
		if hold {
			<-r.Context().Done()
		}
	}
}

func TestExecStream(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, ndjsonServer(t, []string{
		`{"type":"stdout","data":"aGVsbG8K"}`, // "hello\n"
		`{"type":"keepalive"}`,
		`{"type":"stderr","data":"AP8="}`, // 0x00 0xff
		`{"type":"future-thing"}`,
		`{"type":"stdout","data":"YnllCg=="}`, // "bye\n"
		`{"type":"exit","exitCode":7,"durationMs":12}`,
	}, false))
	s, err := c.ExecStream(t.Context(), "sb1", ExecRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	exit, err := s.CopyTo(&stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "hello\nbye\n" || stderr.String() != "\x00\xff" {
		t.Errorf("got stdout %q stderr %q, want %q %q", stdout.String(), stderr.String(), "hello\nbye\n", "\x00\xff")
	}
	if want := (ExitInfo{ExitCode: 7, DurationMs: 12}); exit != want {
		t.Errorf("got %+v, want %+v", exit, want)
	}
	// The end is sticky.
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after end: got %v, want io.EOF", err)
	}
	if got, err := s.Wait(); err != nil || got.ExitCode != 7 {
		t.Errorf("Wait after end: got %+v %v, want exit 7", got, err)
	}
}

func TestExecStreamEvents(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, ndjsonServer(t, []string{
		`{"type":"stdout","data":"YQ=="}`,
		`{"type":"stderr","data":"Yg=="}`,
		`{"type":"exit","exitCode":0}`,
	}, false))
	s, err := c.ExecStream(t.Context(), "sb1", ExecRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type+":"+string(ev.Data))
	}
	if d := cmp.Diff([]string{"stdout:a", "stderr:b"}, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestExecStreamFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		lines   []string
		hold    bool
		opts    []Option
		timeout time.Duration
		check   func(error) bool
	}{
		{"failure line", []string{`{"type":"stdout","data":"YQ=="}`, `{"type":"stream.error","error":{"code":"unavailable","message":"agent went away"}}`}, false, nil, 0,
			func(err error) bool {
				var ae *APIError
				return errors.As(err, &ae) && ae.Message == "agent went away" && ae.Status == http.StatusServiceUnavailable && errors.Is(err, ErrUnavailable)
			}},
		{"ends without exit", []string{`{"type":"stdout","data":"YQ=="}`}, false, nil, 0,
			func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"garbage line", []string{`not json`}, false, nil, 0,
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "decode stream event") }},
		{"silent server hits idle timeout", []string{`{"type":"keepalive"}`}, true, []Option{WithStreamIdleTimeout(200 * time.Millisecond)}, 0,
			func(err error) bool { return errors.Is(err, ErrDeadlineExceeded) }},
		{"silent server and cancelled context", nil, true, nil, 200 * time.Millisecond,
			func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, ndjsonServer(t, tt.lines, tt.hold), tt.opts...)
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			s, err := c.ExecStream(ctx, "sb1", ExecRequest{Command: "x"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := s.CopyTo(io.Discard, io.Discard)
				done <- err
			}()
			select {
			case err := <-done:
				if !tt.check(err) {
					t.Errorf("got %v (%T), not the error wanted", err, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("stream hung")
			}
		})
	}
}

func TestExecStreamClose(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, ndjsonServer(t, []string{`{"type":"stdout","data":"YQ=="}`}, true))
	s, err := c.ExecStream(t.Context(), "sb1", ExecRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on an open stream")
	}
	if _, err := s.Wait(); err == nil {
		t.Error("Wait after Close: got no error, want one")
	}
}

func TestExecStreamRejected(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]any{"error": map[string]string{"code": "not_found", "message": "no such sandbox"}})
	})
	_, err := c.ExecStream(t.Context(), "sb1", ExecRequest{Command: "x"})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
}
