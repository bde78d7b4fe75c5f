package errdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHTTPStatusOfClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{ErrInvalidArgument, 400, "invalid_argument"},
		{ErrNotFound, 404, "not_found"},
		{ErrAlreadyExists, 409, "already_exists"},
		{ErrConflict, 409, "conflict"},
		{ErrUnauthenticated, 401, "unauthenticated"},
		{ErrPermissionDenied, 403, "permission_denied"},
		{ErrTooLarge, 413, "too_large"},
		{ErrUnavailable, 503, "unavailable"},
		{ErrDeadlineExceeded, 504, "deadline_exceeded"},
		{ErrNotImplemented, 501, "not_implemented"},
		{ErrInsufficientStorage, 507, "insufficient_storage"},
		{errors.New("boom"), 500, "internal"},
		{nil, 500, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			wrapped := fmt.Errorf("op: %w", tt.err)
			status, code := HTTPStatus(wrapped)
			if status != tt.status || code != tt.code {
				t.Errorf("got %d %q, want %d %q", status, code, tt.status, tt.code)
			}
			if tt.err == nil || tt.code == "internal" {
				return
			}
			// The code names the class again on the other side of the wire.
			if got := FromCode(code); got != tt.err {
				t.Errorf("FromCode(%q) = %v, want %v", code, got, tt.err)
			}
		})
	}
	if got := FromCode("internal"); got != nil {
		t.Errorf("FromCode(internal) = %v, want nil", got)
	}
}

// TestHTTPStatusOfRemoteErrors: what a remote (an agent) answers is untrusted;
// the code decides the status, within 4xx/5xx, and never 401.
func TestHTTPStatusOfRemoteErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		remote RemoteError
		status int
		code   string
	}{
		{"as the class says", RemoteError{Status: 404, Code: "not_found"}, 404, "not_found"},
		{"another 5xx for a 5xx class", RemoteError{Status: 502, Code: "unavailable"}, 502, "unavailable"},
		{"another 4xx for a 4xx class", RemoteError{Status: 416, Code: "invalid_argument"}, 416, "invalid_argument"},
		{"below 100 would panic in WriteHeader", RemoteError{Status: 99, Code: "not_found"}, 404, "not_found"},
		{"zero", RemoteError{Status: 0, Code: "conflict"}, 409, "conflict"},
		{"informational", RemoteError{Status: 101, Code: "conflict"}, 409, "conflict"},
		{"success with an error code", RemoteError{Status: 200, Code: "invalid_argument"}, 400, "invalid_argument"},
		{"redirect", RemoteError{Status: 302, Code: "not_found"}, 404, "not_found"},
		{"beyond 599", RemoteError{Status: 999, Code: "unavailable"}, 503, "unavailable"},
		{"5xx for a 4xx class", RemoteError{Status: 500, Code: "not_found"}, 404, "not_found"},
		{"4xx for a 5xx class", RemoteError{Status: 404, Code: "unavailable"}, 503, "unavailable"},
		{"401 for another class", RemoteError{Status: 401, Code: "invalid_argument"}, 400, "invalid_argument"},
		{"unauthenticated is the daemon's to say", RemoteError{Status: 401, Code: "unauthenticated"}, 502, "internal"},
		{"unauthenticated with another status", RemoteError{Status: 400, Code: "unauthenticated"}, 502, "internal"},
		{"the sandbox refused a file operation", RemoteError{Status: 403, Code: "permission_denied"}, 403, "permission_denied"},
		{"unknown code", RemoteError{Status: 418, Code: "teapot"}, 500, "internal"},
		{"unknown code, 5xx", RemoteError{Status: 502, Code: "teapot"}, 502, "internal"},
		{"internal", RemoteError{Status: 500, Code: "internal"}, 500, "internal"},
		{"internal with 401", RemoteError{Status: 401, Code: "internal"}, 500, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re := tt.remote
			status, code := HTTPStatus(fmt.Errorf("agent: %w", &re))
			if status != tt.status || code != tt.code {
				t.Errorf("got %d %q, want %d %q", status, code, tt.status, tt.code)
			}
		})
	}
}

// TestWriteRemoteError writes what a hostile agent might answer through a
// real ResponseWriter: no panic, a status the code allows, and a message
// that says what the remote claimed when its code was not kept.
func TestWriteRemoteError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		remote  RemoteError
		status  int
		code    string
		message string
	}{
		{RemoteError{Status: 99, Code: "not_found", Message: "no file"}, 404, "not_found", "no file"},
		{RemoteError{Status: 401, Code: "unauthenticated", Message: "wrong token"}, 502, "internal", `the remote answered "unauthenticated": wrong token`},
		{RemoteError{Status: 1000, Code: "x", Message: "odd"}, 500, "internal", `the remote answered "x": odd`},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			re := tt.remote
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				Write(w, fmt.Errorf("forward: %w", &re), "")
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b Body
			if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
				t.Fatalf("decode the error document: %v", err)
			}
			if resp.StatusCode != tt.status || b.Error.Code != tt.code || !strings.Contains(b.Error.Message, tt.message) {
				t.Errorf("got %d %+v, want %d %q with %q", resp.StatusCode, b.Error, tt.status, tt.code, tt.message)
			}
		})
	}
}

func TestReadBoundsAndClassifies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		code   string
		class  error
		msg    string
	}{
		{"document", 404, `{"error":{"code":"not_found","message":"gone"}}`, "not_found", ErrNotFound, "gone"},
		{"not a document", 503, "<html>down</html>", "unavailable", ErrUnavailable, "HTTP 503: <html>down</html>"},
		{"unknown status", 418, "tea", "internal", nil, "HTTP 418: tea"},
		{"empty code", 400, `{"error":{"message":"x"}}`, "invalid_argument", ErrInvalidArgument, "HTTP 400: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re := Read(&http.Response{StatusCode: tt.status, Body: io.NopCloser(strings.NewReader(tt.body))})
			if re.Status != tt.status || re.Code != tt.code || !strings.HasPrefix(re.Message, tt.msg) {
				t.Errorf("got %+v, want status %d code %q message %q", re, tt.status, tt.code, tt.msg)
			}
			if tt.class != nil && !errors.Is(re, tt.class) {
				t.Errorf("%v does not wrap %v", re, tt.class)
			}
		})
	}
	// A huge body is cut: the remote is untrusted.
	huge := strings.Repeat("a", 1<<20)
	re := Read(&http.Response{StatusCode: 500, Body: io.NopCloser(strings.NewReader(huge))})
	if len(re.Message) > 600 {
		t.Errorf("message of %d bytes from a 1 MiB body, want it cut to about 512", len(re.Message))
	}
}
