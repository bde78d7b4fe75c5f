package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestTerminalValidation checks that bad terminal requests are refused at
// the edge, naming the field, before the sandbox is even looked up (the
// server here has no manager).
func TestTerminalValidation(t *testing.T) {
	t.Parallel()
	h := New(Options{Token: "t", Log: slog.New(slog.DiscardHandler)}).Handler()
	const sb = "/v1/sandboxes/sb-0123456789ab"
	ws := http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}
	tests := []struct {
		name, method, path, body string
		header                   http.Header
		field                    string
	}{
		{"cols too big", "POST", sb + "/terminals", `{"cols":1001}`, nil, "cols"},
		{"rows negative", "POST", sb + "/terminals", `{"rows":-1}`, nil, "rows"},
		{"detach negative", "POST", sb + "/terminals", `{"detachTimeoutSec":-5}`, nil, "detachTimeoutSec"},
		{"detach too long", "POST", sb + "/terminals", `{"detachTimeoutSec":86401}`, nil, "detachTimeoutSec"},
		{"command and argv", "POST", sb + "/terminals", `{"command":"sh","argv":["sh"]}`, nil, "command"},
		{"env name", "POST", sb + "/terminals", `{"env":{"A B":"x"}}`, nil, "env"},
		{"cwd NUL", "POST", sb + "/terminals", `{"cwd":"a\u0000b"}`, nil, "cwd"},
		{"unknown field", "POST", sb + "/terminals", `{"colz":3}`, nil, "body"},
		{"bad sandbox id", "GET", "/v1/sandboxes/BAD/terminals", "", nil, "id"},
		{"bad session id", "GET", sb + "/terminals/xyz", "", nil, "sid"},
		{"bad session id kill", "DELETE", sb + "/terminals/0123456789ABCDEF", "", nil, "sid"},
		{"attach without upgrade", "GET", sb + "/terminals/0123456789abcdef/attach", "", nil, "Upgrade"},
		{"exec cols 0", "GET", sb + "/exec?" + url.Values{"cols": {"0"}, "tty": {"true"}}.Encode(), "", ws, "cols"},
		{"exec cols 1001", "GET", sb + "/exec?cols=1001", "", ws, "cols"},
		{"exec rows word", "GET", sb + "/exec?rows=many", "", ws, "rows"},
		{"exec tty", "GET", sb + "/exec?tty=maybe", "", ws, "tty"},
		{"exec env", "GET", sb + "/exec?env=NOEQUALS", "", ws, "env"},
		{"exec unknown", "GET", sb + "/exec?colour=red", "", ws, "colour"},
		{"exec NUL", "GET", sb + "/exec?command=a%00b", "", ws, "command"},
		{"exec no upgrade", "GET", sb + "/exec?command=sh", "", nil, "Upgrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			for k, v := range tt.header {
				req.Header[k] = v
			}
			req.Header.Set("Authorization", "Bearer t")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var body errdefs.Body
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != http.StatusBadRequest || !strings.HasPrefix(body.Error.Message, tt.field) {
				t.Errorf("got %d %s, want 400 naming %s", rec.Code, rec.Body, tt.field)
			}
		})
	}
}

func TestValidateTerminalNormalizes(t *testing.T) {
	t.Parallel()
	req := wire.TerminalRequest{Cwd: "/workspace/a/../b", TTY: true}
	if err := validateTerminal(&req, nil); err != nil {
		t.Fatal(err)
	}
	if req.Cwd != "/workspace/b" {
		t.Errorf("cwd %q, want /workspace/b", req.Cwd)
	}
}
