// Package api serves hotcell's public HTTP API: routes, authentication, the
// one adapter that turns handler errors into JSON error documents, and the
// pass-through of per-sandbox calls to the sandbox's agent.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/codeinterp"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/ndjson"
	"github.com/hotcell/hotcell/internal/redact"
	"github.com/hotcell/hotcell/internal/wire"
)

// Options configure a Server.
type Options struct {
	Manager Manager
	// Lifecycle, Activity, Egress, Ports, Stats and GatewayAccess are the
	// manager's other parts (contracts.go); nil turns their routes off.
	Lifecycle     Lifecycle
	Activity      Activity
	Egress        Egress
	Ports         Ports
	Stats         Stats
	GatewayAccess GatewayAccess
	// Pools keeps the templates' warm pools; nil turns the pool routes off.
	Pools Pools
	// Token is the daemon's own credential: it may do everything,
	// managing API keys included.
	Token string
	// APIKeys are named keys, accepted as bearer tokens on every route but
	// key management; nil accepts only Token.
	APIKeys APIKeys
	// Host reports /v1/host.
	Host func(ctx context.Context) (wire.HostInfo, error)
	// ExecTimeout and MaxExecOutput are the exec defaults.
	ExecTimeout   time.Duration
	MaxExecOutput int64
	// PreviewDomain serves {port}-{id}.<PreviewDomain> as the HTTP preview
	// of that port; empty turns previews by host name off.
	PreviewDomain string
	// ConsoleSessionTTL is how long a web console sign-in lasts
	// (DefaultConsoleSessionTTL when 0).
	ConsoleSessionTTL time.Duration
	// PreviewTokenTTL is how long a preview token from preview-url lasts
	// (DefaultPreviewTokenTTL when 0).
	PreviewTokenTTL time.Duration
	// Hosts are the Host headers the API answers; others get a 403. nil
	// answers every Host (unit tests of other behaviour); the daemon
	// always sets it.
	Hosts *HostAllowlist
	// AllowLocalRepos lets a create's repo.url be a host path or file://
	// URL (the daemon's allow_local_repos).
	AllowLocalRepos bool
	// Metrics serves GET /metrics; nil answers it with 501.
	Metrics http.Handler
	// ObserveRequest, if set, learns of every finished request; r.Pattern
	// is the route that matched ("" if none).
	ObserveRequest func(r *http.Request, status int, elapsed time.Duration)
	Log            *slog.Logger
	// Backups serves backups, restores and snapshots; nil answers them with 501.
	Backups Backups
	// Templates builds and keeps templates; nil answers their routes
	// (and a create from a template) with 501.
	Templates Templates
	// Gateway is the LLM gateway; nil answers its routes with 501.
	Gateway Gateway
	// ReloadGateway re-reads the gateway providers' keys from the config
	// (POST /v1/gateway/reload); nil answers 501.
	ReloadGateway func(ctx context.Context) (wire.GatewayReload, error)
	// E2B serves E2B's API under /e2b (internal/e2b), with the prefix
	// stripped; it checks its own credentials (API keys, envd tokens). nil
	// leaves /e2b unserved.
	E2B http.Handler
	// StreamWriteTimeout bounds each write of a streamed answer (NDJSON
	// lines, pass-through chunks): a client that stops reading for this
	// long loses its stream, and the work behind it stops. 0 means
	// ndjson.DefaultWriteTimeout.
	StreamWriteTimeout time.Duration
	// Forward, if set, wraps the handler the MCP tools' calls go through
	// in process, as it wraps the daemon's listener: of several daemons
	// on one store, a tool call for a sandbox whose agent another daemon
	// holds is forwarded to it (daemon.Forwarding).
	Forward func(http.Handler) http.Handler
}

// Server is the HTTP API.
type Server struct {
	opts     Options
	log      *slog.Logger
	mux      *http.ServeMux
	sessions *sessions
	code     codeinterp.Servers // the sandboxes' code servers (code.go)
}

// New builds the API server.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ExecTimeout == 0 {
		opts.ExecTimeout = 60 * time.Second
	}
	if opts.MaxExecOutput == 0 {
		opts.MaxExecOutput = 1 << 20
	}
	if opts.PreviewTokenTTL <= 0 {
		opts.PreviewTokenTTL = DefaultPreviewTokenTTL
	}
	if opts.StreamWriteTimeout <= 0 {
		opts.StreamWriteTimeout = ndjson.DefaultWriteTimeout
	}
	if opts.ConsoleSessionTTL <= 0 {
		opts.ConsoleSessionTTL = DefaultConsoleSessionTTL
	}
	s := &Server{opts: opts, log: opts.Log.With("component", "api"), mux: http.NewServeMux(), sessions: newSessions()}
	s.routes()
	return s
}

// handlerFunc is a handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(pattern string, h handlerFunc) {
	s.mux.Handle(pattern, s.adapt(h))
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	s.handle("GET /v1/host", s.host)
	s.handle("GET /v1/openapi.json", s.openapi)

	s.handle("POST /v1/sandboxes", s.createSandbox)
	s.handle("GET /v1/sandboxes", s.listSandboxes)
	s.handle("GET /v1/sandboxes/{id}", s.getSandbox)
	s.handle("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	s.handle("POST /v1/sandboxes/{id}/start", s.startSandbox)
	s.handle("POST /v1/sandboxes/{id}/stop", s.stopSandbox)

	s.handle("POST /v1/sandboxes/{id}/exec", s.exec)

	s.handle("GET /v1/sandboxes/{id}/files", s.readFile)
	s.handle("PUT /v1/sandboxes/{id}/files", s.writeFile)
	s.handle("DELETE /v1/sandboxes/{id}/files", s.removeFile)
	s.handle("GET /v1/sandboxes/{id}/fs/list", s.listDir)
	s.handle("GET /v1/sandboxes/{id}/fs/stat", s.stat)
	s.handle("POST /v1/sandboxes/{id}/fs/mkdir", s.mkdir)
	s.handle("POST /v1/sandboxes/{id}/fs/move", s.move)
	s.handle("GET /v1/sandboxes/{id}/archive", s.getArchive)
	s.handle("PUT /v1/sandboxes/{id}/archive", s.putArchive)

	s.processRoutes()
	s.terminalRoutes()
	s.watchRoutes()
	s.portRoutes()
	s.statsRoutes()
	s.egressRoutes()
	s.mcpRoutes()
	s.lifecycleRoutes()
	s.backupRoutes()
	s.gatewayRoutes()
	s.keyRoutes()
	s.templateRoutes()
	s.sessionRoutes()
	s.codeRoutes()

	// Anything else under the API gets a JSON 404 rather than the mux's text.
	s.handle("/", func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("no route %s %s (see /v1/openapi.json): %w", r.Method, r.URL.Path, errdefs.ErrNotFound)
	})
}

// Handler returns the API with authentication and request logging.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := newRequestID()
		rw := &responseWriter{ResponseWriter: w}
		rw.Header().Set("X-Request-Id", rid)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, rid))
		aborted := s.serve(rw, r, rid)
		// slog escapes the path; the query may hold file paths, so it is
		// logged as a value too. Authorization is never logged; the name of
		// the API key used is.
		s.log.Debug("request", "id", rid, "method", r.Method, "path", r.URL.Path, "query", redact.Query(r.URL.RawQuery),
			"status", rw.status, "bytes", rw.written, "ms", time.Since(start).Milliseconds(), "aborted", aborted, "apiKey", rw.apiKey)
		if s.opts.ObserveRequest != nil {
			s.opts.ObserveRequest(r, rw.status, time.Since(start))
		}
		if aborted {
			panic(http.ErrAbortHandler) // now that the request is counted
		}
	})
}

// serve routes one request. It reports whether the handler aborted the
// response (http.ErrAbortHandler) so that the request is still logged and
// counted before the connection is cut.
func (s *Server) serve(rw *responseWriter, r *http.Request, rid string) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			aborted = true
		}
	}()
	if !s.opts.Hosts.Allowed(r.Host) {
		setAPIHeaders(rw.Header())
		errdefs.Write(rw, errHostNotAllowed(r), rid)
	} else if s.servePreviewHost(rw, r) {
		// {port}-{id}.<preview domain>: the preview checks its own credentials.
	} else if s.opts.E2B != nil && (r.URL.Path == e2bPrefix || strings.HasPrefix(r.URL.Path, e2bPrefix+"/")) {
		setAPIHeaders(rw.Header())
		http.StripPrefix(e2bPrefix, s.opts.E2B).ServeHTTP(rw, r)
	} else if r.URL.Path == "/" && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		// A browser pointed at the daemon gets the console.
		setAPIHeaders(rw.Header())
		http.Redirect(rw, r, consolePrefix+"/", http.StatusFound)
	} else if r.URL.Path == consolePrefix || strings.HasPrefix(r.URL.Path, consolePrefix+"/") {
		// The console's static files: no data, so no credentials.
		serveConsole(rw, r)
	} else if _, pattern := s.mux.Handler(r); strings.HasSuffix(pattern, previewPathSuffix) {
		// A preview by path checks its own credentials and sets its own
		// policy (confinePreview): the app's scripts must run.
		s.touch(r)
		s.mux.ServeHTTP(rw, r)
	} else if setAPIHeaders(rw.Header()); r.URL.Path == "/healthz" || pattern == "POST /v1/session" {
		// Open, or the console's sign-in, which checks the key it is given.
		s.touch(r)
		s.mux.ServeHTTP(rw, r)
	} else if c, err := s.authenticate(r); err != nil {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="hotcell"`)
		errdefs.Write(rw, err, rid)
	} else {
		rw.apiKey = c.key
		withCaller := r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
		// The mux records the route on the request it served; the request
		// log and the metrics read it from the caller's, also when the
		// handler aborts the response.
		defer func() { r.Pattern = withCaller.Pattern }()
		s.touch(withCaller)
		s.mux.ServeHTTP(rw, withCaller)
	}
	return false
}

// apiCSP is the Content-Security-Policy of every API answer. Many carry
// bytes a sandbox chose (a file read, whose Content-Type the agent sets; a
// process log; an error naming a path), and the API's origin is also the
// web console's, whose session cookie the browser sends to it: an answer
// rendered as a page must not run a sandbox's script there. "sandbox"
// gives such a page an opaque origin with no scripts; the API's own
// clients never render its answers, so they lose nothing.
const apiCSP = "sandbox; default-src 'none'; frame-ancestors 'none'"

// setAPIHeaders sets the headers every API answer carries, whatever
// handler writes it: the console's pages and the previews, which are
// meant to be rendered, set their own.
func setAPIHeaders(h http.Header) {
	h.Set("Content-Security-Policy", apiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
}

// e2bPrefix is where E2B's API is served: E2B_API_URL and E2B_SANDBOX_URL
// both point at http://<daemon>/e2b.
const e2bPrefix = "/e2b"

// authenticate accepts the daemon's token or, when keys are enabled, an API
// key, as Authorization: Bearer; without that header, a web console
// session's cookie (with its CSRF and Origin checks, session.go).
func (s *Server) authenticate(r *http.Request) (caller, error) {
	if r.Header.Get("Authorization") == "" {
		return s.authenticateSession(r)
	}
	return s.authenticateBearer(r)
}

// authenticateBearer accepts only Authorization: Bearer.
func (s *Server) authenticateBearer(r *http.Request) (caller, error) {
	h := r.Header.Get("Authorization")
	tok, _ := strings.CutPrefix(h, "Bearer ")
	if c, ok := s.verify(r, tok); ok && tok != h {
		return c, nil
	}
	return caller{}, errNoCredentials
}

type requestIDKey struct{}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// adapt is the one place handler errors become responses.
func (s *Server) adapt(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		rid, _ := r.Context().Value(requestIDKey{}).(string)
		status, code := errdefs.HTTPStatus(err)
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away; nobody is left to answer.
			s.log.Debug("request canceled by client", "id", rid, "path", r.URL.Path)
			return
		}
		lvl := slog.LevelInfo
		if status >= 500 {
			lvl = slog.LevelError
		}
		s.log.Log(r.Context(), lvl, "request failed", "id", rid, "method", r.Method, "path", r.URL.Path, "status", status, "code", code, "err", err)
		var rep reportedError
		if errors.As(err, &rep) {
			return // the stream's failure line told the client
		}
		if rw, ok := w.(*responseWriter); ok && rw.status != 0 {
			// Too late for an error document: break the response so that
			// the client sees a failed transfer, not a short body that
			// looks whole.
			panic(http.ErrAbortHandler)
		}
		errdefs.Write(w, err, rid)
	})
}

// reportedError is an error a stream already sent as its stream.error
// line: the adapter logs it and leaves the response alone.
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

func reported(err error) error { return reportedError{err} }

// startStream begins an NDJSON answer with the API's write timeout and the
// request's id in its failure line; keepalive() is sent when the stream
// has been quiet for about every keepalive.
func (s *Server) startStream(w http.ResponseWriter, r *http.Request, status int, keepalive time.Duration, keepaliveEvent func() any) *ndjson.Writer {
	rid, _ := r.Context().Value(requestIDKey{}).(string)
	return ndjson.Start(w, r, ndjson.Options{
		Status:         status,
		WriteTimeout:   s.opts.StreamWriteTimeout,
		Keepalive:      keepalive,
		KeepaliveEvent: keepaliveEvent,
		RequestID:      rid,
	})
}

// responseWriter records the status for logs and for the error adapter.
type responseWriter struct {
	http.ResponseWriter
	status  int
	written int64
	apiKey  string // the name of the API key the request used, for the log
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a bounded JSON body, rejecting unknown fields so that a
// misspelt option is an error rather than silently ignored.
func readJSON(r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body is larger than %d bytes: %w", limit, errdefs.ErrTooLarge)
		}
		if errors.Is(err, io.EOF) {
			return errdefs.Invalid("body", "a JSON object is required")
		}
		return errdefs.Invalid("body", "invalid JSON: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("body", "unexpected data after the JSON object")
	}
	return nil
}
