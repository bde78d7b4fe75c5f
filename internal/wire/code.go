package wire

import "encoding/json"

// Code-interpreter languages (docs/code.md).
const (
	CodeLanguagePython     = "python"
	CodeLanguageJavaScript = "javascript"
	CodeLanguageBash       = "bash"
)

// CodeExecuteRequest is the body of POST /v1/sandboxes/{id}/code/execute.
// Code runs in the context ContextID, or in the default context of
// Language (python when both are empty); giving both is an error.
type CodeExecuteRequest struct {
	Code      string `json:"code"`
	Language  string `json:"language,omitempty"`
	ContextID string `json:"contextId,omitempty"`
	// Envs are set for this execution only.
	Envs map[string]string `json:"envs,omitempty"`
	// TimeoutMs interrupts the execution after that long (the context
	// keeps its state); 0 means the daemon's exec timeout.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// Code execution stream event types (application/x-ndjson): output as it
// happens, results and an error, the execution count, keepalives while
// quiet, and exactly one CodeEventEnd (or a StreamError when the stream
// itself failed).
const (
	CodeEventStdout         = "stdout"
	CodeEventStderr         = "stderr"
	CodeEventResult         = "result"
	CodeEventError          = "error"
	CodeEventExecutionCount = "executionCount"
	CodeEventKeepalive      = "keepalive"
	CodeEventEnd            = "end"
)

// CodeEvent is one line of an execution stream. Text is set for stdout and
// stderr, Result for result, Error for error, ExecutionCount for
// executionCount and end.
type CodeEvent struct {
	Type           string      `json:"type"`
	Text           string      `json:"text,omitempty"`
	Result         *CodeResult `json:"result,omitempty"`
	Error          *CodeError  `json:"error,omitempty"`
	ExecutionCount int         `json:"executionCount,omitempty"`
}

// CodeResult is a value the code produced: the last expression's value
// (IsMainResult) or a display() call, in every format the interpreter
// rendered it in. PNG, JPEG and PDF are base64; JSON is the value itself.
type CodeResult struct {
	IsMainResult bool            `json:"isMainResult"`
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	PDF          string          `json:"pdf,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	JavaScript   string          `json:"javascript,omitempty"`
}

// Formats lists the formats r carries, text first.
func (r CodeResult) Formats() []string {
	var f []string
	for _, p := range []struct {
		name string
		set  bool
	}{
		{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", r.PNG != ""}, {"jpeg", r.JPEG != ""}, {"pdf", r.PDF != ""}, {"latex", r.LaTeX != ""},
		{"json", len(r.JSON) > 0}, {"javascript", r.JavaScript != ""},
	} {
		if p.set {
			f = append(f, p.name)
		}
	}
	return f
}

// Code error names hotcell itself reports, besides the interpreter's own
// (ZeroDivisionError, ReferenceError, ExitError for a bash cell's status).
const (
	// CodeErrorTimeout: the execution ran past timeoutMs and was
	// interrupted; the context keeps its state.
	CodeErrorTimeout = "TimeoutError"
	// CodeErrorKernelDied: the interpreter exited; the next execution in
	// the context starts a new one, without the old state.
	CodeErrorKernelDied = "KernelDied"
)

// CodeError is an execution's failure.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// CodeLogs is what an execution wrote, chunk by chunk.
type CodeLogs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// CodeExecution is the buffered answer of an execution (the stream's
// events gathered).
type CodeExecution struct {
	Results        []CodeResult `json:"results"`
	Logs           CodeLogs     `json:"logs"`
	Error          *CodeError   `json:"error,omitempty"`
	ExecutionCount int          `json:"executionCount,omitempty"`
}

// Text is the main result's text, if there is one.
func (e CodeExecution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// CodeContextRequest is the body of POST /v1/sandboxes/{id}/code/contexts.
type CodeContextRequest struct {
	// Language is python (the default), javascript or bash.
	Language string `json:"language,omitempty"`
	// Cwd is the context's working directory (default /home/user).
	Cwd string `json:"cwd,omitempty"`
	// Envs are the context's environment, on top of the sandbox's.
	Envs map[string]string `json:"envs,omitempty"`
}

// CodeContext is a running interpreter with its own state.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextList is the answer of GET /v1/sandboxes/{id}/code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}
