package codeinterp

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestReadEvents(t *testing.T) {
	stream := `{"type": "number_of_executions", "execution_count": 3}
{"type": "stdout", "text": "a\n"}
{"type": "keepalive"}
{"type": "stderr", "text": "b\n"}
{"type": "result", "is_main_result": true, "text": "42", "html": "<b>42</b>", "png": "iVBO", "json": {"k": [1]}, "chart": {"x": 1}}
{"type": "error", "name": "ValueError", "value": "bad", "traceback": ["line 1", "line 2"]}
{"type": "some_future_type"}
{"type": "end_of_execution"}
{"type": "stdout", "text": "after the end"}
`
	var got []wire.CodeEvent
	if err := ReadEvents(strings.NewReader(stream), func(ev wire.CodeEvent) error { got = append(got, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []wire.CodeEvent{
		{Type: wire.CodeEventExecutionCount, ExecutionCount: 3},
		{Type: wire.CodeEventStdout, Text: "a\n"},
		{Type: wire.CodeEventStderr, Text: "b\n"},
		{Type: wire.CodeEventResult, Result: &wire.CodeResult{IsMainResult: true, Text: "42", HTML: "<b>42</b>", PNG: "iVBO", JSON: []byte(`{"k": [1]}`)}},
		{Type: wire.CodeEventError, Error: &wire.CodeError{Name: "ValueError", Value: "bad", Traceback: "line 1\nline 2"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestReadEventsFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		stream string
		want   error
	}{
		"no end":   {`{"type": "stdout", "text": "a"}` + "\n", ErrUnexpectedEnd},
		"empty":    {"", ErrUnexpectedEnd},
		"not json": {"hello\n", nil},
		"too long": {`{"type": "stdout", "text": "` + strings.Repeat("x", MaxLineBytes) + `"}` + "\n", errdefs.ErrTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			err := ReadEvents(strings.NewReader(tc.stream), func(wire.CodeEvent) error { return nil })
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCheckExecute(t *testing.T) {
	ok := []wire.CodeExecuteRequest{
		{Code: "1"},
		{Code: "1", Language: "JS"},
		{Code: "1", ContextID: "0b7e9f9e-6a8e-4f7a-9d61-2f0c2b1f3a10", Envs: map[string]string{"A_1": "x"}, TimeoutMs: 1000},
	}
	for _, req := range ok {
		if _, err := CheckExecute(req); err != nil {
			t.Errorf("%+v: %v", req, err)
		}
	}
	bad := map[string]wire.CodeExecuteRequest{
		"language":  {Code: "1", Language: "cobol"},
		"contextId": {Code: "1", Language: "python", ContextID: "a"},
		"envs":      {Code: "1", Envs: map[string]string{"A-B": "x"}},
		"timeoutMs": {Code: "1", TimeoutMs: -5},
		"code":      {Code: strings.Repeat("x", MaxCodeBytes+1)},
	}
	for field, req := range bad {
		_, err := CheckExecute(req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), field+": ") {
			t.Errorf("%s: got %v, want an invalid %s", field, err, field)
		}
	}
	if _, err := CheckExecute(wire.CodeExecuteRequest{Code: "1", ContextID: "../etc"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("path in context id: %v", err)
	}
}

// FuzzParseEvent: whatever a (hostile) code server sends, parsing neither
// panics nor loses the kind of line it was.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"stdout","text":"x"}`, `{"type":"result","is_main_result":true,"png":"AAAA","json":[1,2]}`,
		`{"type":"error","traceback":["a",1]}`, `{"type":"number_of_executions","execution_count":"7"}`,
		`{"type":"end_of_execution"}`, `[]`, `null`, `{"text":{"a":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, end, ok, err := ParseEvent(line)
		if err != nil && (ok || end) {
			t.Fatalf("error %v with ok=%v end=%v", err, ok, end)
		}
		if ok && ev.Type == "" {
			t.Fatalf("accepted event without a type: %+v", ev)
		}
		if ev.Type == wire.CodeEventResult && ev.Result == nil || ev.Type == wire.CodeEventError && ev.Error == nil {
			t.Fatalf("event %+v lacks its payload", ev)
		}
	})
}
