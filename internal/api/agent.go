package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// Per-sandbox calls are the agent API behind auth: the handler validates the
// request here, at the edge, then streams it to the agent and the answer
// back, holding neither in memory.

// maxExecBody bounds an exec request; stdin travels inside it.
const maxExecBody = 16 << 20

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	stream, err := parseBool("stream", r.URL.Query().Get("stream"))
	if err != nil {
		return err
	}
	var req wire.ExecRequest
	if err := readJSON(r, maxExecBody, &req); err != nil {
		return err
	}
	if err := cmdspec.Exec(&req, cmdspec.Defaults{Timeout: s.opts.ExecTimeout, MaxOutput: s.opts.MaxExecOutput}); err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	q := url.Values{}
	if stream {
		q.Set("stream", "true")
	}
	return s.forward(w, r, id, http.MethodPost, "/v1/exec", q, bytes.NewReader(body), int64(len(body)), stream)
}

// idAndPath validates the route's {id} and the path query parameter, the
// two inputs every file call has.
func idAndPath(r *http.Request) (string, url.Values, error) {
	id, err := pathID(r)
	if err != nil {
		return "", nil, err
	}
	q, err := pathQuery(r)
	return id, q, err
}

// pathQuery validates the path query parameter and returns it resolved.
func pathQuery(r *http.Request) (url.Values, error) {
	p, err := fspath.Resolve("path", r.URL.Query().Get("path"))
	if err != nil {
		return nil, err
	}
	return url.Values{"path": {p}}, nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	id, q, err := idAndPath(r)
	if err != nil {
		return err
	}
	for _, f := range []string{"offset", "length"} {
		raw := r.URL.Query().Get(f)
		v, err := parseNonNegative(f, raw)
		if err != nil {
			return err
		}
		if raw != "" {
			q.Set(f, strconv.FormatInt(v, 10))
		}
	}
	return s.forward(w, r, id, http.MethodGet, "/v1/files", q, nil, 0, true)
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	id, q, err := idAndPath(r)
	if err != nil {
		return err
	}
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err := wire.ParseFileMode(m)
		if err != nil {
			return errdefs.Invalid("mode", "%v", err)
		}
		q.Set("mode", mode.String())
	}
	return s.forward(w, r, id, http.MethodPut, "/v1/files", q, r.Body, r.ContentLength, false)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	id, q, err := idAndPath(r)
	if err != nil {
		return err
	}
	rec, err := parseBool("recursive", r.URL.Query().Get("recursive"))
	if err != nil {
		return err
	}
	if rec {
		q.Set("recursive", "true")
	}
	return s.forward(w, r, id, http.MethodDelete, "/v1/files", q, nil, 0, false)
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request) error {
	return s.forwardPath(w, r, "/v1/fs/list")
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) error {
	return s.forwardPath(w, r, "/v1/fs/stat")
}

func (s *Server) getArchive(w http.ResponseWriter, r *http.Request) error {
	return s.forwardPath(w, r, "/v1/archive")
}

func (s *Server) putArchive(w http.ResponseWriter, r *http.Request) error {
	id, q, err := idAndPath(r)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodPut, "/v1/archive", q, r.Body, r.ContentLength, false)
}

// forwardPath forwards a GET whose only parameter is path.
func (s *Server) forwardPath(w http.ResponseWriter, r *http.Request, agentPath string) error {
	id, q, err := idAndPath(r)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodGet, agentPath, q, nil, 0, true)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.MkdirRequest
	if err := readJSON(r, 64<<10, &req); err != nil {
		return err
	}
	if req.Path, err = fspath.Resolve("path", req.Path); err != nil {
		return err
	}
	return s.forwardJSON(w, r, id, "/v1/fs/mkdir", req)
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.MoveRequest
	if err := readJSON(r, 64<<10, &req); err != nil {
		return err
	}
	if req.From, err = fspath.Resolve("from", req.From); err != nil {
		return err
	}
	if req.To, err = fspath.Resolve("to", req.To); err != nil {
		return err
	}
	return s.forwardJSON(w, r, id, "/v1/fs/move", req)
}

func (s *Server) forwardJSON(w http.ResponseWriter, r *http.Request, id, agentPath string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodPost, agentPath, nil, bytes.NewReader(body), int64(len(body)), false)
}

// forward sends one validated request to the sandbox's agent and streams
// the answer back. flush sends each chunk on as it arrives (streams).
func (s *Server) forward(w http.ResponseWriter, r *http.Request, id, method, agentPath string, q url.Values, body io.Reader, size int64, flush bool) error {
	conn, err := s.opts.Manager.Agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer s.begin(id)()
	u := agentPath
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(r.Context(), method, "http://agent"+u, body)
	if err != nil {
		return err
	}
	// The agent's logs and its streams' failure lines carry the id the
	// client got in X-Request-Id.
	if rid, _ := r.Context().Value(requestIDKey{}).(string); rid != "" {
		req.Header.Set("X-Request-Id", rid)
	}
	if body != nil {
		passBody(w) // the body may be the client's, still arriving
		req.ContentLength = size
		if size < 0 {
			req.ContentLength = -1
		}
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := conn.Send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Only headers that describe the body pass; the agent is untrusted and
	// must not set cookies or redirects on the API's origin.
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Range"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(resp.StatusCode)
	return s.copyResponse(w, resp.Body, flush)
}

// copyResponse streams src to w; with flush each chunk is sent as it comes.
// Every write has the stream write deadline, so a client that stops
// reading ends the copy, and with it the agent's side. An error after the
// headers (the agent died half-way, the client stalled) goes back to the
// adapter, which breaks the response rather than end it cleanly.
func (s *Server) copyResponse(w http.ResponseWriter, src io.Reader, flush bool) error {
	dw := s.deadlined(w)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dw.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write the answer to the client: %w", werr)
			}
			if flush {
				dw.Flush()
			}
		}
		if err == io.EOF {
			s.refreshDeadline(w)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the answer from the agent: %w", err)
		}
	}
}
