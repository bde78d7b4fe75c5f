package codeinterp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// ExecuteRequest is the body of the code server's POST /execute: E2B's
// code-interpreter protocol (snake_case), plus timeout_ms, which E2B's
// SDK does not send.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
}

// ContextRequest is the body of the code server's POST /contexts.
type ContextRequest struct {
	Language string            `json:"language,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	EnvVars  map[string]string `json:"env_vars,omitempty"`
}

// Limits of what the edge accepts.
const (
	MaxCodeBytes = 1 << 20
	maxEnvs      = 256
	maxEnvBytes  = 32 << 10
	// MaxLineBytes bounds one line from the code server (a result with a
	// large image); the server is inside the sandbox and may be hostile.
	MaxLineBytes = 32 << 20
)

var (
	envKey    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	contextID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Language checks and normalises a language field ("" stays "").
func Language(field, lang string) (string, error) {
	switch strings.ToLower(lang) {
	case "":
		return "", nil
	case "python", "python3", "py":
		return wire.CodeLanguagePython, nil
	case "javascript", "js", "node", "nodejs":
		return wire.CodeLanguageJavaScript, nil
	case "bash", "sh", "shell":
		return wire.CodeLanguageBash, nil
	}
	return "", errdefs.Invalid(field, "%q is not a supported language: use python, javascript or bash", clip(lang))
}

// ContextID checks a context id.
func ContextID(field, id string) error {
	if !contextID.MatchString(id) {
		return errdefs.Invalid(field, "%q is not a context id (letters, digits, - and _, at most 64)", clip(id))
	}
	return nil
}

// Envs checks environment variables set by a call.
func Envs(field string, envs map[string]string) error {
	if len(envs) > maxEnvs {
		return errdefs.Invalid(field, "%d variables; at most %d", len(envs), maxEnvs)
	}
	for k, v := range envs {
		if !envKey.MatchString(k) {
			return errdefs.Invalid(field, "%q is not a variable name (letters, digits and _, not starting with a digit)", clip(k))
		}
		if len(v) > maxEnvBytes || strings.ContainsRune(v, 0) {
			return errdefs.Invalid(field, "the value of %s is over %d bytes or has a NUL byte", k, maxEnvBytes)
		}
	}
	return nil
}

// CheckExecute validates an execution at the edge and returns the code
// server's request for it.
func CheckExecute(req wire.CodeExecuteRequest) (ExecuteRequest, error) {
	if len(req.Code) > MaxCodeBytes {
		return ExecuteRequest{}, errdefs.Invalid("code", "%d bytes; at most %d", len(req.Code), MaxCodeBytes)
	}
	lang, err := Language("language", req.Language)
	if err != nil {
		return ExecuteRequest{}, err
	}
	if req.ContextID != "" {
		if lang != "" {
			return ExecuteRequest{}, errdefs.Invalid("contextId", "give contextId or language, not both")
		}
		if err := ContextID("contextId", req.ContextID); err != nil {
			return ExecuteRequest{}, err
		}
	}
	if err := Envs("envs", req.Envs); err != nil {
		return ExecuteRequest{}, err
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > 24*3600*1000 {
		return ExecuteRequest{}, errdefs.Invalid("timeoutMs", "%d is outside 0 to 86400000 (24 hours)", req.TimeoutMs)
	}
	return ExecuteRequest{Code: req.Code, ContextID: req.ContextID, Language: lang, EnvVars: req.Envs, TimeoutMs: req.TimeoutMs}, nil
}

// CheckContext validates a context creation at the edge.
func CheckContext(req wire.CodeContextRequest) (ContextRequest, error) {
	lang, err := Language("language", req.Language)
	if err != nil {
		return ContextRequest{}, err
	}
	if req.Cwd != "" && (!strings.HasPrefix(req.Cwd, "/") || len(req.Cwd) > 4096 || strings.ContainsRune(req.Cwd, 0)) {
		return ContextRequest{}, errdefs.Invalid("cwd", "%q is not an absolute path", clip(req.Cwd))
	}
	if err := Envs("envs", req.Envs); err != nil {
		return ContextRequest{}, err
	}
	return ContextRequest{Language: lang, Cwd: req.Cwd, EnvVars: req.Envs}, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// serverEvent is one line of the code server's /execute stream (E2B's
// shape).
type serverEvent struct {
	Type           string          `json:"type"`
	Text           json.RawMessage `json:"text"`
	IsMainResult   bool            `json:"is_main_result"`
	HTML           string          `json:"html"`
	Markdown       string          `json:"markdown"`
	SVG            string          `json:"svg"`
	PNG            string          `json:"png"`
	JPEG           string          `json:"jpeg"`
	PDF            string          `json:"pdf"`
	LaTeX          string          `json:"latex"`
	JSON           json.RawMessage `json:"json"`
	JavaScript     string          `json:"javascript"`
	Name           string          `json:"name"`
	Value          string          `json:"value"`
	Traceback      json.RawMessage `json:"traceback"`
	ExecutionCount int             `json:"execution_count"`
}

// stringish reads a field that is a string, or a list of strings to join.
func stringish(raw json.RawMessage, sep string) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var l []string
	if json.Unmarshal(raw, &l) == nil {
		return strings.Join(l, sep)
	}
	return ""
}

// ParseEvent translates one line of the code server's stream into
// hotcell's event. end reports the server's end_of_execution; ok is false
// for lines to skip (keepalives of the server, unknown types).
func ParseEvent(line []byte) (ev wire.CodeEvent, end, ok bool, err error) {
	var se serverEvent
	if err := json.Unmarshal(line, &se); err != nil {
		return wire.CodeEvent{}, false, false, fmt.Errorf("code server sent a line that is not JSON: %w", err)
	}
	switch se.Type {
	case "stdout":
		return wire.CodeEvent{Type: wire.CodeEventStdout, Text: stringish(se.Text, "")}, false, true, nil
	case "stderr":
		return wire.CodeEvent{Type: wire.CodeEventStderr, Text: stringish(se.Text, "")}, false, true, nil
	case "result":
		r := &wire.CodeResult{
			IsMainResult: se.IsMainResult, Text: stringish(se.Text, ""), HTML: se.HTML, Markdown: se.Markdown,
			SVG: se.SVG, PNG: se.PNG, JPEG: se.JPEG, PDF: se.PDF, LaTeX: se.LaTeX, JavaScript: se.JavaScript,
		}
		if len(se.JSON) > 0 && string(se.JSON) != "null" {
			r.JSON = se.JSON
		}
		return wire.CodeEvent{Type: wire.CodeEventResult, Result: r}, false, true, nil
	case "error":
		return wire.CodeEvent{Type: wire.CodeEventError, Error: &wire.CodeError{Name: se.Name, Value: se.Value, Traceback: stringish(se.Traceback, "\n")}}, false, true, nil
	case "number_of_executions":
		return wire.CodeEvent{Type: wire.CodeEventExecutionCount, ExecutionCount: se.ExecutionCount}, false, true, nil
	case "end_of_execution":
		return wire.CodeEvent{}, true, false, nil
	}
	return wire.CodeEvent{}, false, false, nil
}

// ErrUnexpectedEnd says the code server's stream ended before its
// end_of_execution (the server died mid-cell).
var ErrUnexpectedEnd = errors.New("the code server's stream ended before the execution did")

// ReadEvents reads the code server's stream, calling fn with each event
// until the end_of_execution line. fn's error stops the read.
func ReadEvents(r io.Reader, fn func(wire.CodeEvent) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, MaxLineBytes)
		if len(line) > 0 {
			ev, end, ok, perr := ParseEvent(line)
			if perr != nil {
				return perr
			}
			if end {
				// Read the stream's own end too: a body closed before it
				// cuts the agent's connection instead of reusing it.
				_, _ = io.Copy(io.Discard, io.LimitReader(br, 64<<10))
				return nil
			}
			if ok {
				if err := fn(ev); err != nil {
					return err
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrUnexpectedEnd
			}
			return err
		}
	}
}

// readLine reads one line without its newline, failing on lines over max
// bytes rather than holding them.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("code server sent a line over %d bytes: %w", max, errdefs.ErrTooLarge)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// Gather adds ev to the buffered execution x.
func Gather(x *wire.CodeExecution, ev wire.CodeEvent) {
	switch ev.Type {
	case wire.CodeEventStdout:
		x.Logs.Stdout = append(x.Logs.Stdout, ev.Text)
	case wire.CodeEventStderr:
		x.Logs.Stderr = append(x.Logs.Stderr, ev.Text)
	case wire.CodeEventResult:
		x.Results = append(x.Results, *ev.Result)
	case wire.CodeEventError:
		x.Error = ev.Error
	case wire.CodeEventExecutionCount:
		x.ExecutionCount = ev.ExecutionCount
	}
}

// ServerError turns a non-2xx answer of the code server ({"error": msg})
// into an error of the matching class; it closes nothing.
func ServerError(id string, status int, body io.Reader) error {
	var doc struct {
		Error string `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(body, 16<<10))
	if json.Unmarshal(data, &doc) != nil || doc.Error == "" {
		doc.Error = strings.TrimSpace(string(data))
	}
	if len(doc.Error) > 300 {
		doc.Error = doc.Error[:300] + "..."
	}
	msg := fmt.Sprintf("code server of sandbox %s: %s", id, doc.Error)
	switch status {
	case 400:
		return fmt.Errorf("%s: %w", msg, errdefs.ErrInvalidArgument)
	case 404:
		return fmt.Errorf("%s: %w", msg, errdefs.ErrNotFound)
	}
	return fmt.Errorf("%s (status %d): %w", msg, status, errdefs.ErrUnavailable)
}

// CopyLines reads the code server's stream line by line, checking that
// each is JSON and at most MaxLineBytes, and calls fn with each (newline
// included) up to and with the end_of_execution line.
func CopyLines(r io.Reader, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, MaxLineBytes)
		if len(line) > 0 {
			_, end, _, perr := ParseEvent(line)
			if perr != nil {
				return perr
			}
			if err := fn(append(line, '\n')); err != nil {
				return err
			}
			if end {
				_, _ = io.Copy(io.Discard, io.LimitReader(br, 64<<10))
				return nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrUnexpectedEnd
			}
			return err
		}
	}
}
