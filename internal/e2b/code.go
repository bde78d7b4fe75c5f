package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/codeinterp"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
)

// CodePort is the port of E2B's code interpreter (@e2b/code-interpreter's
// JUPYTER_PORT): with E2B_SANDBOX_URL set the SDK sends its calls to that
// URL with E2b-Sandbox-Port: 49999, else to 49999-<id>.<domain>.
const CodePort = images.CodePort

// CodeInterpreterTemplate is @e2b/code-interpreter's default template; it
// means hotcell/code unless e2b_templates maps it elsewhere.
const CodeInterpreterTemplate = "code-interpreter-v1"

// trafficTokenHeader is E2B's header for a sandbox's traffic token, which
// the code-interpreter SDK sends on every call when it has one.
const trafficTokenHeader = "E2B-Traffic-Access-Token"

// codeRoutes registers E2B's code-interpreter protocol (docs/code.md): the
// calls pass, checked, to the sandbox's code server, started on demand.
func (s *Server) codeRoutes() {
	s.code("POST /execute", s.codeExecute)
	s.code("GET /contexts", s.codeContexts)
	s.code("POST /contexts", s.codeCreateContext)
	s.code("DELETE /contexts/{ctx}", s.codeContext)
	s.code("POST /contexts/{ctx}/restart", s.codeContext)
}

// code registers a code-interpreter route. The SDK sends X-Access-Token
// only on /execute: like E2B, whose port 49999 is public traffic, hotcell
// lets the other calls through without it when the sandbox was created
// with public traffic (E2B's default); otherwise the sandbox's envd token
// is needed, as X-Access-Token or E2B-Traffic-Access-Token.
func (s *Server) code(pattern string, h func(w http.ResponseWriter, r *http.Request, id string) error) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		err := func() error {
			id := r.Header.Get(SandboxIDHeader)
			if id == "" {
				return fmt.Errorf("missing E2b-Sandbox-Id header: %w", errdefs.ErrInvalidArgument)
			}
			tok := r.Header.Get("X-Access-Token")
			if tok == "" {
				tok = r.Header.Get(trafficTokenHeader)
			}
			if tok != "" {
				if !s.EnvdTokenOK(id, tok) {
					return fmt.Errorf("wrong access token for sandbox %s: %w", id, errdefs.ErrUnauthenticated)
				}
			} else {
				sb, err := s.opts.Sandboxes.Get(r.Context(), id)
				if err != nil {
					return err
				}
				if sb.Labels[LabelPublicTraffic] != "true" {
					return fmt.Errorf("sandbox %s has no public traffic: send its envd access token as X-Access-Token: %w", id, errdefs.ErrUnauthenticated)
				}
			}
			if s.opts.Activity != nil {
				defer s.opts.Activity.Begin(id)()
			}
			return h(w, r, id)
		}()
		if err != nil {
			s.logFailure(r, err)
			writeAPIError(w, err)
		}
	})
}

// codeCall passes one call to sandbox id's code server; a non-2xx answer
// becomes an error. The caller closes the body.
func (s *Server) codeCall(r *http.Request, id, method, path string, in any) (*http.Response, error) {
	conn, err := s.opts.Sandboxes.Agent(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return s.codeServers.Send(r.Context(), id, conn, method, path, in)
}

func readCodeJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, codeinterp.MaxCodeBytes+(64<<10)+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(data) > codeinterp.MaxCodeBytes+(64<<10) {
		return fmt.Errorf("body over %d bytes: %w", codeinterp.MaxCodeBytes+(64<<10), errdefs.ErrTooLarge)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.Invalid("body", "not a JSON object: %v", err)
	}
	return nil
}

func (s *Server) codeExecute(w http.ResponseWriter, r *http.Request, id string) error {
	var req codeinterp.ExecuteRequest
	if err := readCodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Code) > codeinterp.MaxCodeBytes {
		return errdefs.Invalid("code", "%d bytes; at most %d", len(req.Code), codeinterp.MaxCodeBytes)
	}
	lang, err := codeinterp.Language("language", req.Language)
	if err != nil {
		return err
	}
	if req.ContextID != "" {
		if lang != "" {
			return errdefs.Invalid("context_id", "give context_id or language, not both")
		}
		if err := codeinterp.ContextID("context_id", req.ContextID); err != nil {
			return err
		}
	}
	if err := codeinterp.Envs("env_vars", req.EnvVars); err != nil {
		return err
	}
	// The SDK enforces its own timeoutMs on the client side; the server
	// has none, as on E2B.
	req = codeinterp.ExecuteRequest{Code: req.Code, ContextID: req.ContextID, Language: lang, EnvVars: req.EnvVars}
	resp, err := s.codeCall(r, id, http.MethodPost, "/execute", req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// The SDK reads E2B's own NDJSON, which the code server speaks: its
	// lines pass as they are, each checked and bounded (the server is in
	// the sandbox), and flushed as they come.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	err = codeinterp.CopyLines(resp.Body, func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		// The SDK has no failure line; E2B's server sends this one when
		// the kernel's stream breaks.
		line, _ := json.Marshal(map[string]string{"type": "unexpected_end_of_execution", "error": err.Error()})
		_, _ = w.Write(append(line, '\n'))
		s.log.Info("code execution stream broke", "sandbox", id, "err", err)
	}
	return nil
}

func (s *Server) codeContexts(w http.ResponseWriter, r *http.Request, id string) error {
	resp, err := s.codeCall(r, id, http.MethodGet, "/contexts", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var list []codeContext
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return fmt.Errorf("code server of sandbox %s: decode contexts: %w", id, errdefs.ErrUnavailable)
	}
	if list == nil {
		list = []codeContext{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// codeContext is E2B's Context: {id, language, cwd}.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (s *Server) codeCreateContext(w http.ResponseWriter, r *http.Request, id string) error {
	var req codeinterp.ContextRequest
	if err := readCodeJSON(r, &req); err != nil {
		return err
	}
	lang, err := codeinterp.Language("language", req.Language)
	if err != nil {
		return err
	}
	if req.Cwd != "" && (req.Cwd[0] != '/' || len(req.Cwd) > 4096) {
		return errdefs.Invalid("cwd", "%q is not an absolute path", req.Cwd)
	}
	if err := codeinterp.Envs("env_vars", req.EnvVars); err != nil {
		return err
	}
	resp, err := s.codeCall(r, id, http.MethodPost, "/contexts", codeinterp.ContextRequest{Language: lang, Cwd: req.Cwd, EnvVars: req.EnvVars})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var c codeContext
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&c); err != nil {
		return fmt.Errorf("code server of sandbox %s: decode context: %w", id, errdefs.ErrUnavailable)
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// codeContext serves DELETE /contexts/{ctx} and POST /contexts/{ctx}/restart.
func (s *Server) codeContext(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.PathValue("ctx")
	if err := codeinterp.ContextID("context", ctx); err != nil {
		return err
	}
	path := "/contexts/" + url.PathEscape(ctx)
	if r.Method == http.MethodPost {
		path += "/restart"
	}
	resp, err := s.codeCall(r, id, r.Method, path, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	w.WriteHeader(http.StatusNoContent)
	return nil
}
