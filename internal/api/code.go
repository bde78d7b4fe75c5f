package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/hotcell/hotcell/internal/codeinterp"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// codeKeepalive is how often a quiet execution stream gets a keepalive.
const codeKeepalive = 10 * time.Second

// maxBufferedExecution bounds what a buffered execution gathers in memory;
// more (many large images) must be streamed.
const maxBufferedExecution = 64 << 20

func (s *Server) codeRoutes() {
	s.handle("POST /v1/sandboxes/{id}/code/execute", s.codeExecute)
	s.handle("GET /v1/sandboxes/{id}/code/contexts", s.codeListContexts)
	s.handle("POST /v1/sandboxes/{id}/code/contexts", s.codeCreateContext)
	s.handle("DELETE /v1/sandboxes/{id}/code/contexts/{ctx}", s.codeDeleteContext)
	s.handle("POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart", s.codeRestartContext)
}

// codeCall sends one call to sandbox id's code server (started on demand);
// a non-2xx answer becomes an error. The caller closes the body.
func (s *Server) codeCall(r *http.Request, id, method, path string, in any) (*http.Response, error) {
	conn, err := s.opts.Manager.Agent(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return s.code.Send(r.Context(), id, conn, method, path, in)
}

func (s *Server) codeExecute(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	stream, err := parseBool("stream", r.URL.Query().Get("stream"))
	if err != nil {
		return err
	}
	var req wire.CodeExecuteRequest
	if err := readJSON(r, codeinterp.MaxCodeBytes+(64<<10), &req); err != nil {
		return err
	}
	sreq, err := codeinterp.CheckExecute(req)
	if err != nil {
		return err
	}
	if sreq.TimeoutMs == 0 {
		sreq.TimeoutMs = s.opts.ExecTimeout.Milliseconds()
	}
	defer s.begin(id)() // an execution is activity while it runs
	resp, err := s.codeCall(r, id, http.MethodPost, "/execute", sreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if !stream {
		x := wire.CodeExecution{Results: []wire.CodeResult{}, Logs: wire.CodeLogs{Stdout: []string{}, Stderr: []string{}}}
		size := 0
		err := codeinterp.ReadEvents(resp.Body, func(ev wire.CodeEvent) error {
			size += len(ev.Text) + 256
			if ev.Result != nil {
				size += len(ev.Result.Text) + len(ev.Result.HTML) + len(ev.Result.PNG) + len(ev.Result.JPEG) + len(ev.Result.SVG) +
					len(ev.Result.PDF) + len(ev.Result.JSON) + len(ev.Result.Markdown) + len(ev.Result.LaTeX) + len(ev.Result.JavaScript)
			}
			if size > maxBufferedExecution {
				return fmt.Errorf("execution output is over %d MiB: ask with ?stream=true: %w", maxBufferedExecution>>20, errdefs.ErrTooLarge)
			}
			codeinterp.Gather(&x, ev)
			return nil
		})
		if err != nil {
			return fmt.Errorf("execute in sandbox %s: %w", id, err)
		}
		writeJSON(w, http.StatusOK, x)
		return nil
	}
	st := s.startStream(w, r, http.StatusOK, codeKeepalive, func() any { return wire.CodeEvent{Type: wire.CodeEventKeepalive} })
	defer st.Close()
	count := 0
	err = codeinterp.ReadEvents(resp.Body, func(ev wire.CodeEvent) error {
		if ev.Type == wire.CodeEventExecutionCount {
			count = ev.ExecutionCount
		}
		return st.Send(ev)
	})
	if err != nil {
		if st.Err() != nil {
			return nil // the client left; the execution finishes in its context
		}
		err = fmt.Errorf("execute in sandbox %s: %w", id, err)
		_ = st.Fail(err)
		return reported(err)
	}
	_ = st.End(wire.CodeEvent{Type: wire.CodeEventEnd, ExecutionCount: count})
	return nil
}

func (s *Server) codeListContexts(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	resp, err := s.codeCall(r, id, http.MethodGet, "/contexts", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	list := wire.CodeContextList{Contexts: []wire.CodeContext{}}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list.Contexts); err != nil {
		return fmt.Errorf("code server of sandbox %s: decode contexts: %w", id, errdefs.ErrUnavailable)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) codeCreateContext(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.CodeContextRequest
	if err := readJSON(r, 1<<20, &req); err != nil {
		return err
	}
	sreq, err := codeinterp.CheckContext(req)
	if err != nil {
		return err
	}
	resp, err := s.codeCall(r, id, http.MethodPost, "/contexts", sreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var c wire.CodeContext
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&c); err != nil {
		return fmt.Errorf("code server of sandbox %s: decode context: %w", id, errdefs.ErrUnavailable)
	}
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *Server) pathCodeContext(r *http.Request) (string, string, error) {
	id, err := pathID(r)
	if err != nil {
		return "", "", err
	}
	ctx := r.PathValue("ctx")
	return id, ctx, codeinterp.ContextID("ctx", ctx)
}

func (s *Server) codeDeleteContext(w http.ResponseWriter, r *http.Request) error {
	id, ctx, err := s.pathCodeContext(r)
	if err != nil {
		return err
	}
	resp, err := s.codeCall(r, id, http.MethodDelete, "/contexts/"+url.PathEscape(ctx), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) codeRestartContext(w http.ResponseWriter, r *http.Request) error {
	id, ctx, err := s.pathCodeContext(r)
	if err != nil {
		return err
	}
	resp, err := s.codeCall(r, id, http.MethodPost, "/contexts/"+url.PathEscape(ctx)+"/restart", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	w.WriteHeader(http.StatusNoContent)
	return nil
}
