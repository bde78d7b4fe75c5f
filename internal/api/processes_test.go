package api

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestValidateStartProcess(t *testing.T) {
	t.Parallel()
	ok := []wire.StartProcessRequest{
		{Command: "python3 -m http.server 8000"},
		{Argv: []string{"sleep", "60"}, Env: map[string]string{"A": "b"}, Cwd: "sub", Name: "dev server", KeepAlive: true},
		{Command: "true", LogCapBytes: 1024},
		{Command: "true", LogCapBytes: 1 << 30},
	}
	for i, req := range ok {
		if err := validateStartProcess(&req); err != nil {
			t.Errorf("case %d: got %v, want valid", i, err)
		}
	}
	bad := []struct {
		req   wire.StartProcessRequest
		field string
	}{
		{wire.StartProcessRequest{}, "command"},
		{wire.StartProcessRequest{Command: "a", Argv: []string{"b"}}, "command"},
		{wire.StartProcessRequest{Argv: []string{""}}, "argv[0]"},
		{wire.StartProcessRequest{Command: "true", Env: map[string]string{"1A": "x"}}, "env"},
		{wire.StartProcessRequest{Command: "true", Cwd: "a\x00b"}, "cwd"},
		{wire.StartProcessRequest{Command: "true", Name: "a\nb"}, "name"},
		{wire.StartProcessRequest{Command: "true", Name: strings.Repeat("n", 200)}, "name"},
		{wire.StartProcessRequest{Command: "true", LogCapBytes: -1}, "logCapBytes"},
		{wire.StartProcessRequest{Command: "true", LogCapBytes: 100}, "logCapBytes"},
		{wire.StartProcessRequest{Command: "true", LogCapBytes: 1 << 31}, "logCapBytes"},
	}
	for _, tc := range bad {
		err := validateStartProcess(&tc.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: got %v, want an invalid-argument error naming %s", tc.req, err, tc.field)
		}
	}
}

func TestParseProcessLogQuery(t *testing.T) {
	t.Parallel()
	ok := []struct{ in, want string }{
		{"", ""},
		{"follow=true&stream=stdout&offset=12", "follow=true&offset=12&stream=stdout"},
		{"stream=both&stdoutOffset=1&stderrOffset=2", "stderrOffset=2&stdoutOffset=1"},
		{"follow=false&stream=stderr", "stream=stderr"},
	}
	for _, tc := range ok {
		in, _ := url.ParseQuery(tc.in)
		q, err := parseProcessLogQuery(in)
		if err != nil || q.Encode() != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, q.Encode(), err, tc.want)
		}
	}
	bad := []struct{ in, field string }{
		{"stream=stdout&offset=-1", "offset"},
		{"offset=-1", "offset"},
		{"offset=3", "offset"},
		{"stream=stdout&offset=x", "offset"},
		{"stream=stdout&offset=", "offset"},
		{"stdoutOffset=-2", "stdoutOffset"},
		{"stream=stderr&stderrOffset=2", "offset"},
		{"stream=stdin", "stream"},
		{"follow=perhaps", "follow"},
	}
	for _, tc := range bad {
		in, _ := url.ParseQuery(tc.in)
		_, err := parseProcessLogQuery(in)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("%q: got %v, want an invalid-argument error naming %s", tc.in, err, tc.field)
		}
	}
}

// Bad input is refused at the edge, before any sandbox is looked up (the
// server here has no manager: reaching it would panic).
func TestProcessRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	h := New(Options{Token: "t", Log: slog.New(slog.DiscardHandler)}).Handler()
	tests := []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"GET", "/v1/sandboxes/abc123/processes/notapid", "", 404, ""},
		{"GET", "/v1/sandboxes/abc123/processes/0", "", 404, ""},
		{"POST", "/v1/sandboxes/abc123/processes/12/signal", `{"signal":"SIGFOO"}`, 400, "signal"},
		{"POST", "/v1/sandboxes/abc123/processes/12/signal", `{"signal":"0"}`, 400, "signal"},
		{"POST", "/v1/sandboxes/abc123/processes/12/signal", `{}`, 400, "signal"},
		{"GET", "/v1/sandboxes/abc123/processes/12/logs?stream=stdout&offset=-1", "", 400, "offset"},
		{"GET", "/v1/sandboxes/abc123/processes?state=zombie", "", 400, "state"},
		{"POST", "/v1/sandboxes/abc123/processes", `{"command":"x","logCapBytes":5}`, 400, "logCapBytes"},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.field) {
			t.Errorf("%s %s: got %d %s, want %d naming %q", tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.field)
		}
		if tc.status == http.StatusNotFound && !strings.Contains(rec.Body.String(), "not_found") {
			t.Errorf("%s %s: got %s, want not_found", tc.method, tc.path, rec.Body)
		}
	}
}

func FuzzParseProcessLogQuery(f *testing.F) {
	for _, s := range []string{"", "stream=stdout&offset=5", "follow=1&stdoutOffset=3&stderrOffset=2", "offset=-1", "stream=both&offset=1", "stream=x", "offset=9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		in, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseProcessLogQuery(in)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: error %v is not an invalid argument", raw, err)
			}
			return
		}
		for _, f := range []string{"offset", "stdoutOffset", "stderrOffset"} {
			if v := q.Get(f); strings.HasPrefix(v, "-") {
				t.Fatalf("%q: %s=%s passed", raw, f, v)
			}
		}
	})
}
