// Package e2b serves E2B's API on top of hotcell, so that code written for
// the e2b SDK runs unchanged against a hotcell daemon
// (../../docs/e2b.md). Two surfaces share one handler, mounted by the API
// at /e2b:
//
//   - the control plane (POST /v2/sandboxes, DELETE /sandboxes/{id}, ...),
//     REST and JSON, authenticated by X-API-KEY (an API key or the daemon's
//     token) and answering errors in E2B's shape {"code":404,"message":...};
//   - envd, the in-sandbox API (/process.Process/*, /filesystem.Filesystem/*,
//     /files, /health), in the Connect protocol with the JSON codec, routed
//     by the E2b-Sandbox-Id header (or the 49983-<id>.<domain> host) and
//     authenticated by that sandbox's envd access token.
//
// Nothing here runs anything itself: every call goes through the sandbox
// manager and the sandbox's hotcell agent, as hotcell's own API does.
package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/codeinterp"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// Sandboxes is what the E2B routes need from the sandbox manager.
type Sandboxes interface {
	Create(ctx context.Context, req wire.CreateSandboxRequest, co sandbox.CreateOptions) (wire.Sandbox, error)
	Get(ctx context.Context, id string) (wire.Sandbox, error)
	List(ctx context.Context, f sandbox.ListFilter) ([]wire.Sandbox, error)
	Destroy(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) (wire.Sandbox, error)
	Resume(ctx context.Context, id string) (wire.Sandbox, error)
	SetTimeouts(ctx context.Context, id string, req wire.SetTimeoutsRequest) (wire.Sandbox, error)
	Agent(ctx context.Context, id string) (*agentconn.Conn, error)
}

// Keys verifies API keys sent as X-API-KEY.
type Keys interface {
	// Verify reports the name of the key, and whether it is a live key.
	Verify(ctx context.Context, key string) (name string, ok bool)
}

// Activity keeps idle timeouts honest, as on hotcell's own API.
type Activity interface {
	Touch(id string)
	Begin(id string) (end func())
}

// Options configure a Server.
type Options struct {
	Sandboxes Sandboxes
	// Keys verifies API keys; nil accepts only Token.
	Keys Keys
	// Stats, if set, serves sandbox metrics.
	Stats Stats
	// Activity, if set, learns of every envd call.
	Activity Activity
	// Token is the daemon's own token, accepted as an API key too.
	Token string
	// Secret derives each sandbox's envd access token (EnvdToken). It must
	// stay the same across daemon restarts, or running E2B clients lose
	// their sandboxes.
	Secret []byte
	// DefaultImage is what the template "base" means.
	DefaultImage string
	// Templates maps other template ids to images; an id not in it is
	// taken as an image name.
	Templates map[string]string
	// HotcellTemplates, if set, resolves a template id that Templates does
	// not map as a hotcell template (docs/templates.md): ok is false when
	// there is no template of that name.
	HotcellTemplates TemplateResolver
	// Domain is the sandbox domain reported to the SDK: sandbox.getHost(port)
	// is <port>-<id>.<Domain>, which hotcell's preview proxy answers. Empty
	// reports null.
	Domain string
	Log    *slog.Logger
}

// TemplateResolver turns req into a create from hotcell template name:
// its image, its defaults under req's own fields, its workspace seed. ok
// is false, and req unchanged, when no template has that name.
type TemplateResolver func(ctx context.Context, name string, req *wire.CreateSandboxRequest) (co sandbox.CreateOptions, ok bool, err error)

// Server serves the E2B routes. Its Handler expects paths without the
// mount prefix (/v2/sandboxes, /process.Process/Start).
type Server struct {
	opts        Options
	log         *slog.Logger
	mux         *http.ServeMux
	codeServers codeinterp.Servers // the sandboxes' code servers (code.go)
}

// New builds the E2B server.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Log.With("component", "e2b"), mux: http.NewServeMux()}
	s.routes()
	return s
}

// Handler serves every E2B route.
func (s *Server) Handler() http.Handler { return s.mux }

// EnvdVersion is the envd version reported to the SDK. The SDK gates
// features on it (e2b-protocol.md §8): 0.5.7 or later gets octet-stream
// and gzip uploads and closeStdin, and no default-user headers; 0.6.2
// file metadata (X-Metadata-* on writes), 0.6.3 watch events with their
// entry, 0.6.4 watches of network mounts.
const EnvdVersion = "0.6.4"

func (s *Server) routes() {
	s.controlRoutes()
	s.envdRoutes()
	s.codeRoutes()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, fmt.Errorf("no E2B route %s %s: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
}

// envdRoutes registers envd: the process service (process.go), the
// filesystem service (filesystem.go) and /files (files.go).
func (s *Server) envdRoutes() {
	s.envd("GET /health", func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	s.processRoutes()
	s.filesystemRoutes()
	s.filesRoutes()
}

// control registers a control-plane route: the caller must present an API
// key, and errors are written in E2B's shape.
func (s *Server) control(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if !s.apiKeyOK(r) {
			writeAPIError(w, fmt.Errorf("missing or invalid X-API-KEY: mint a key with `hotcell keys create NAME`: %w", errdefs.ErrUnauthenticated))
			return
		}
		if err := h(w, r); err != nil {
			s.logFailure(r, err)
			writeAPIError(w, err)
		}
	})
}

func (s *Server) apiKeyOK(r *http.Request) bool {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		return false
	}
	if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.Token)) == 1 {
		return true
	}
	if s.opts.Keys == nil {
		return false
	}
	_, ok := s.opts.Keys.Verify(r.Context(), key)
	return ok
}

// envdOpen lists the envd routes that check their own credentials: /files
// accepts a signed URL instead of the access token, and /health answers
// anyone (infra's envd does the same).
var envdOpen = map[string]bool{"GET /files": true, "POST /files": true, "GET /health": true}

// envd registers an envd route. The sandbox comes from the E2b-Sandbox-Id
// header; unless the route is in envdOpen, X-Access-Token must be that
// sandbox's envd token. Handlers read the id with SandboxID. Errors are
// written as Connect unary errors; streaming handlers report their own.
func (s *Server) envd(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
	open := envdOpen[pattern]
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("E2b-Sandbox-Id")
		if id == "" && pattern != "GET /health" {
			writeConnectError(w, fmt.Errorf("missing E2b-Sandbox-Id header: %w", errdefs.ErrInvalidArgument))
			return
		}
		if !open && !s.EnvdTokenOK(id, r.Header.Get("X-Access-Token")) {
			writeConnectError(w, fmt.Errorf("missing or wrong X-Access-Token for sandbox %s: %w", id, errdefs.ErrUnauthenticated))
			return
		}
		if id != "" && s.opts.Activity != nil {
			end := s.opts.Activity.Begin(id)
			defer end()
		}
		r = r.WithContext(context.WithValue(r.Context(), sandboxIDKey{}, id))
		if err := h(w, r); err != nil {
			s.logFailure(r, err)
			writeConnectError(w, err)
		}
	})
}

type sandboxIDKey struct{}

// SandboxID is the sandbox an envd request is for.
func SandboxID(r *http.Request) string {
	id, _ := r.Context().Value(sandboxIDKey{}).(string)
	return id
}

// EnvdToken is sandbox id's envd access token: an HMAC of the id under the
// daemon's secret, so it opens that sandbox alone, needs no storage and
// survives daemon restarts.
func (s *Server) EnvdToken(id string) string {
	m := hmac.New(sha256.New, s.opts.Secret)
	m.Write([]byte("e2b-envd-access\x00" + id))
	return "ea_" + hex.EncodeToString(m.Sum(nil)[:20])
}

// EnvdTokenOK reports whether tok is sandbox id's envd token.
func (s *Server) EnvdTokenOK(id, tok string) bool {
	if id == "" || tok == "" || len(s.opts.Secret) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.EnvdToken(id))) == 1
}

func (s *Server) logFailure(r *http.Request, err error) {
	status, code := errdefs.HTTPStatus(err)
	lvl := slog.LevelInfo
	if status >= 500 {
		lvl = slog.LevelError
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		lvl = slog.LevelDebug
	}
	s.log.Log(r.Context(), lvl, "e2b request failed", "method", r.Method, "path", r.URL.Path, "status", status, "code", code, "err", err)
}

// apiError is E2B's control-plane error document. The SDK tests the JSON
// code, not the HTTP status, for its soft outcomes (kill of a missing
// sandbox returns false, pause of a paused one returns false), so every
// error carries both.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeAPIError(w http.ResponseWriter, err error) {
	status, _ := errdefs.HTTPStatus(err)
	writeJSON(w, status, apiError{Code: status, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
