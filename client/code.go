package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/wire"
)

// The code interpreter's types (docs/code.md).
type (
	CodeExecuteRequest = wire.CodeExecuteRequest
	CodeEvent          = wire.CodeEvent
	CodeResult         = wire.CodeResult
	CodeError          = wire.CodeError
	CodeLogs           = wire.CodeLogs
	CodeExecution      = wire.CodeExecution
	CodeContextRequest = wire.CodeContextRequest
	CodeContext        = wire.CodeContext
)

// Code event types and languages.
const (
	CodeEventStdout         = wire.CodeEventStdout
	CodeEventStderr         = wire.CodeEventStderr
	CodeEventResult         = wire.CodeEventResult
	CodeEventError          = wire.CodeEventError
	CodeEventExecutionCount = wire.CodeEventExecutionCount
	CodeEventEnd            = wire.CodeEventEnd

	CodeLanguagePython     = wire.CodeLanguagePython
	CodeLanguageJavaScript = wire.CodeLanguageJavaScript
	CodeLanguageBash       = wire.CodeLanguageBash

	CodeErrorTimeout    = wire.CodeErrorTimeout
	CodeErrorKernelDied = wire.CodeErrorKernelDied
)

// maxCodeLine bounds one line of a code execution stream: a result may
// carry a large image.
const maxCodeLine = 32 << 20

// RunCode runs code in a sandbox made from hotcell/code and returns the
// whole execution once it finished. An error in the code is not an error
// of the call: read CodeExecution.Error.
func (c *Client) RunCode(ctx context.Context, id string, req CodeExecuteRequest) (CodeExecution, error) {
	var out CodeExecution
	op := "run code in sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/code/execute")}, req, &out)
	return out, err
}

// CodeStream is a running execution whose events arrive as they happen.
// Not safe for concurrent use.
type CodeStream struct {
	s    *ndjsonStream
	done bool
	err  error
	x    CodeExecution
}

// RunCodeStream starts an execution and returns once the daemon accepted
// it; read its events with Next, or Wait for the whole execution.
func (c *Client) RunCodeStream(ctx context.Context, id string, req CodeExecuteRequest) (*CodeStream, error) {
	op := "run code in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	s, err := c.openNDJSON(ctx, op, request{
		op: op, method: http.MethodPost, path: sandboxPath(id, "/code/execute"),
		query: url.Values{"stream": {"true"}}, body: bytes.NewReader(data), contentType: "application/json",
	})
	if err != nil {
		return nil, err
	}
	s.sc.Buffer(make([]byte, 0, 64<<10), maxCodeLine)
	return &CodeStream{s: s, x: CodeExecution{Results: []CodeResult{}, Logs: CodeLogs{Stdout: []string{}, Stderr: []string{}}}}, nil
}

// Next returns the next stdout, stderr, result, error or executionCount
// event (keepalives are skipped), and io.EOF after the end.
func (s *CodeStream) Next() (CodeEvent, error) {
	if s.done {
		if s.err != nil {
			return CodeEvent{}, s.err
		}
		return CodeEvent{}, io.EOF
	}
	for {
		var ev CodeEvent
		if err := s.s.next(&ev); err != nil {
			s.done, s.err = true, err
			s.s.release()
			return CodeEvent{}, err
		}
		switch ev.Type {
		case CodeEventStdout, CodeEventStderr, CodeEventResult, CodeEventError, CodeEventExecutionCount:
			gatherCode(&s.x, ev)
			return ev, nil
		case CodeEventEnd:
			if ev.ExecutionCount != 0 {
				s.x.ExecutionCount = ev.ExecutionCount
			}
			s.done = true
			s.s.release()
			return CodeEvent{}, io.EOF
		}
	}
}

// Wait reads what is left and returns the whole execution (the events
// Next returned included).
func (s *CodeStream) Wait() (CodeExecution, error) {
	for {
		_, err := s.Next()
		if err == io.EOF {
			return s.x, nil
		}
		if err != nil {
			return s.x, err
		}
	}
}

// Close abandons the stream. The execution goes on in its context.
func (s *CodeStream) Close() error {
	if !s.done {
		s.done = true
		s.err = fmt.Errorf("%s: stream closed", s.s.op)
	}
	s.s.close()
	return nil
}

func gatherCode(x *CodeExecution, ev CodeEvent) {
	switch ev.Type {
	case CodeEventStdout:
		x.Logs.Stdout = append(x.Logs.Stdout, ev.Text)
	case CodeEventStderr:
		x.Logs.Stderr = append(x.Logs.Stderr, ev.Text)
	case CodeEventResult:
		if ev.Result != nil {
			x.Results = append(x.Results, *ev.Result)
		}
	case CodeEventError:
		x.Error = ev.Error
	case CodeEventExecutionCount:
		x.ExecutionCount = ev.ExecutionCount
	}
}

// CreateCodeContext starts an interpreter with its own state.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req CodeContextRequest) (CodeContext, error) {
	var out CodeContext
	op := "create code context in sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/code/contexts")}, req, &out)
	return out, err
}

// ListCodeContexts lists a sandbox's code contexts.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out wire.CodeContextList
	op := "list code contexts of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/code/contexts")}, nil, &out)
	return out.Contexts, err
}

// RestartCodeContext starts a context's interpreter afresh (its state is
// gone; id, cwd and envs stay).
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) error {
	op := "restart code context " + contextID + " of sandbox " + id
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/code/contexts/"+url.PathEscape(contextID)+"/restart")}, nil, nil)
}

// DeleteCodeContext stops a context's interpreter.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	op := "delete code context " + contextID + " of sandbox " + id
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: sandboxPath(id, "/code/contexts/"+url.PathEscape(contextID))}, nil, nil)
}
