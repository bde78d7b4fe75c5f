package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestValidateRepoURL is the table of what repo.url may name: a network
// remote always, a path on the daemon's host only with allow_local_repos.
func TestValidateRepoURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url                  string
		strict, allowLocalOK bool
	}{
		{"https://example.com/r.git", true, true},
		{"https://user:tok@example.com/r.git", true, true},
		{"HTTP://example.com/r.git", true, true},
		{"ssh://git@example.com/org/r.git", true, true},
		{"git://example.com/r.git", true, true},
		{"git@example.com:org/r.git", true, true},
		{"/srv/repos/r.git", false, true},
		{"/root/.ssh", false, true},
		{"file:///srv/repos/r.git", false, true},
		{"FILE:///srv/repos/r.git", false, true},
		{"relative/path", false, false},
		{"./r.git", false, false},
		{"dir/a@b:c", false, false},
		{"@host:path", false, false},
		{"user@:path", false, false},
		{"https:///nohost", false, false},
		{"ext::sh -c id", false, false},
		{"ext::sh", false, false},
		{"fd::3", false, false},
		{"ftp://example.com/r.git", false, false},
		{"gopher://example.com/r", false, false},
		{"-uhttps://x", false, false},
		{"", false, false},
		{"https://example.com/r\x00", false, false},
		{"https://example.com/r\n", false, false},
	} {
		for _, allow := range []bool{false, true} {
			want := tc.strict || (allow && tc.allowLocalOK)
			err := validateRepoURL(tc.url, allow)
			if want && err != nil {
				t.Errorf("validateRepoURL(%q, allowLocal=%v): got %v, want valid", tc.url, allow, err)
			}
			if !want && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "repo.url")) {
				t.Errorf("validateRepoURL(%q, allowLocal=%v): got %v, want an invalid-argument error naming repo.url", tc.url, allow, err)
			}
			if !want && !allow && tc.allowLocalOK && !strings.Contains(err.Error(), "allow_local_repos") {
				t.Errorf("validateRepoURL(%q): %v does not name the allow_local_repos setting", tc.url, err)
			}
		}
	}
}

func TestValidateCreate(t *testing.T) {
	t.Parallel()
	ok := []wire.CreateSandboxRequest{
		{},
		{Image: "hotcell/base:latest", Env: map[string]string{"A_1": "x"}, Labels: map[string]string{"team": "ai", "a.b/c": ""}},
		{Image: "localhost:5000/a/b@sha256:" + strings.Repeat("a", 64)},
		{Limits: wire.Limits{MemoryMB: 512, CPUs: 1.5, PidsLimit: 256}},
		{Repo: &wire.Repo{URL: "https://user:tok@example.com/r.git", Ref: "feature/x"}},
		{Repo: &wire.Repo{URL: "git@example.com:org/r.git", Ref: "v1.2.3"}},
		{Setup: []string{"make deps"}, SetupTimeoutMs: 1000},
		{Runtime: wire.RuntimeRunc}, {Runtime: wire.RuntimeGVisor},
	}
	for i, req := range ok {
		if err := validateCreate(&req, false); err != nil {
			t.Errorf("case %d: got %v, want valid", i, err)
		}
	}
	bad := []struct {
		req   wire.CreateSandboxRequest
		field string
	}{
		{wire.CreateSandboxRequest{Image: "Bad Image"}, "image"},
		{wire.CreateSandboxRequest{Image: "a/../b"}, "image"},
		{wire.CreateSandboxRequest{Env: map[string]string{"A-B": "x"}}, "env.A-B"},
		{wire.CreateSandboxRequest{Env: map[string]string{"A": "x\x00y"}}, "env.A"},
		{wire.CreateSandboxRequest{Labels: map[string]string{"-x": "v"}}, "labels"},
		{wire.CreateSandboxRequest{Labels: map[string]string{"k": "line\nbreak"}}, "labels.k"},
		{wire.CreateSandboxRequest{Limits: wire.Limits{MemoryMB: 4}}, "limits.memoryMb"},
		{wire.CreateSandboxRequest{Limits: wire.Limits{CPUs: -1}}, "limits.cpus"},
		{wire.CreateSandboxRequest{Limits: wire.Limits{PidsLimit: -3}}, "limits.pidsLimit"},
		{wire.CreateSandboxRequest{Repo: &wire.Repo{URL: "ext::sh -c id"}}, "repo.url"},
		{wire.CreateSandboxRequest{Repo: &wire.Repo{URL: "-uhttps://x"}}, "repo.url"},
		{wire.CreateSandboxRequest{Repo: &wire.Repo{URL: "relative/path"}}, "repo.url"},
		{wire.CreateSandboxRequest{Repo: &wire.Repo{URL: "/r", Ref: "--upload-pack=x"}}, "repo.ref"},
		{wire.CreateSandboxRequest{Setup: []string{"  "}}, "setup[0]"},
		{wire.CreateSandboxRequest{SetupTimeoutMs: -1}, "setupTimeoutMs"},
		{wire.CreateSandboxRequest{Runtime: "runsc"}, "runtime"},
		{wire.CreateSandboxRequest{Runtime: "kata"}, "runtime"},
	}
	for _, tc := range bad {
		err := validateCreate(&tc.req, true)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: got %v, want an invalid-argument error naming %s", tc.req, err, tc.field)
		}
	}
}

// FuzzCreateRequest: no body makes the create parser panic, and whatever it
// accepts stays within the limits it promises.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"image":"hotcell/base:latest","env":{"A":"b"},"labels":{"k":"v"}}`,
		`{"limits":{"memoryMb":64,"cpus":0.5,"pidsLimit":32}}`, `{"repo":{"url":"/x","ref":"main"},"setup":["true"]}`,
		`{"limits":{"cpus":1e400}}`, `{"image":1}`, `[`, `{"persist":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", bytes.NewReader(body))
		var req wire.CreateSandboxRequest
		if err := readJSON(r, maxCreateBody, &req); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrTooLarge) {
				t.Fatalf("parse error of the wrong class: %v", err)
			}
			return
		}
		if err := validateCreate(&req, false); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("validation error of the wrong class: %v", err)
			}
			return
		}
		if len(req.Env) > cmdspec.MaxEnv || len(req.Labels) > maxLabels || len(req.Setup) > maxSetup || req.Limits.MemoryMB < 0 || req.Limits.CPUs < 0 {
			t.Fatalf("accepted out-of-range request %+v", req)
		}
		for k, v := range req.Env {
			if cmdspec.Var("env", k, v) != nil {
				t.Fatalf("accepted env %q=%q", k, v)
			}
		}
	})
}

// FuzzExecRequest: the exec parser never panics, and an accepted request
// has exactly one of command and argv and a resolved absolute cwd.
func FuzzExecRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":"echo hi"}`, `{"argv":["/bin/echo","hi"],"cwd":"sub","env":{"A":"1"},"stdin":"x","timeoutMs":5}`,
		`{"command":"x","argv":["y"]}`, `{"argv":[]}`, `{"cwd":"../../etc","command":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		var req wire.ExecRequest
		if err := readJSON(r, maxExecBody, &req); err != nil {
			return
		}
		if err := cmdspec.Exec(&req, cmdspec.Defaults{Timeout: time.Second, MaxOutput: 1000}); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("wrong class: %v", err)
			}
			return
		}
		if (req.Command == "") == (len(req.Argv) == 0) {
			t.Fatalf("accepted %+v: want exactly one of command and argv", req)
		}
		if req.Cwd != "" && !strings.HasPrefix(req.Cwd, "/") {
			t.Fatalf("cwd %q not resolved", req.Cwd)
		}
		if req.TimeoutMs <= 0 || req.MaxOutputBytes <= 0 {
			t.Fatalf("defaults not applied: %+v", req)
		}
		if _, err := json.Marshal(req); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzQuery: the query parsers never panic and classify every failure.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"path=a&offset=1&length=2", "path=&offset=-1", "state=running&label=a=b&label=c", "recursive=maybe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.RawQuery = raw
		q := r.URL.Query()
		check := func(err error) {
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("wrong class: %v", err)
			}
		}
		_, err := pathQuery(r)
		check(err)
		_, err = parseNonNegative("offset", q.Get("offset"))
		check(err)
		_, err = parseBool("recursive", q.Get("recursive"))
		check(err)
		_, err = validateState(q.Get("state"))
		check(err)
		_, err = parseLabelFilters(q["label"])
		check(err)
	})
}
