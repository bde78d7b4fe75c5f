// Package agent is the in-sandbox agent: the HTTP API the daemon calls over
// the agent channel (exec, files, fs, archive), and the PID 1 duties of a
// sandbox (reaping zombies, forwarding signals, stopping children on
// SIGTERM). It depends on nothing the daemon alone needs (see
// cmd/hotcell-agent/deps_test.go).
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// Version is reported by /v1/health; cmd/hotcell-agent sets it at link time.
var Version = "dev"

// Options configure a handler. The zero value serves a real sandbox.
type Options struct {
	// Workspace is the directory relative paths resolve against and the
	// default cwd of an exec. Default fspath.Workspace.
	Workspace string
	// Shell runs ExecRequest.Command as `Shell -c command`. Default /bin/sh.
	Shell string
	// BaseEnv is the environment every exec starts from; request env is
	// merged over it. Default os.Environ() at NewHandler time, which in a
	// sandbox is the container's env.
	BaseEnv []string
	// Keepalive is the interval of keepalive events on exec streams.
	// Default 15s.
	Keepalive time.Duration
	// Reaper starts and waits for child processes. Default: a process-wide
	// reaper that only waits for the children it started (not PID 1 mode).
	Reaper *Reaper
	// Logger receives request errors. Default slog.Default().
	Logger *slog.Logger
	// ProcDir holds background processes' records and logs. Default /.hotcell-state/procs.
	ProcDir string
	// EtcDir holds the passwd and group files that name users and groups.
	// Default /etc.
	EtcDir string
}

type handler struct {
	opts      Options
	workspace string
	reaper    *Reaper
	log       *slog.Logger
	started   time.Time

	envMu  sync.RWMutex
	envSet map[string]string // PUT /v1/env (env.go)
}

// NewHandler returns the agent API. It serves every route under /v1/.
func NewHandler(opts Options) http.Handler {
	if opts.Workspace == "" {
		opts.Workspace = fspath.Workspace
	}
	opts.Workspace = path.Clean(opts.Workspace)
	if opts.Shell == "" {
		opts.Shell = "/bin/sh"
	}
	if opts.BaseEnv == nil {
		opts.BaseEnv = os.Environ()
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.EtcDir == "" {
		opts.EtcDir = "/etc"
	}
	h := &handler{
		opts:      opts,
		workspace: opts.Workspace,
		reaper:    opts.Reaper,
		log:       opts.Logger.With("component", "agent"),
		started:   time.Now(),
	}
	if h.reaper == nil {
		h.reaper = defaultReaper()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/health", h.adapt(h.health))
	mux.Handle("POST /v1/exec", h.adapt(h.exec))
	mux.Handle("GET /v1/files", h.adapt(h.readFile))
	mux.Handle("PUT /v1/files", h.adapt(h.writeFile))
	mux.Handle("DELETE /v1/files", h.adapt(h.removeFile))
	mux.Handle("GET /v1/fs/list", h.adapt(h.list))
	mux.Handle("GET /v1/fs/stat", h.adapt(h.stat))
	mux.Handle("POST /v1/fs/mkdir", h.adapt(h.mkdir))
	mux.Handle("POST /v1/fs/move", h.adapt(h.move))
	mux.Handle("GET /v1/fs/entries", h.adapt(h.entries))
	mux.Handle("PUT /v1/archive", h.adapt(h.extractArchive))
	mux.Handle("GET /v1/archive", h.adapt(h.createArchive))
	h.processRoutes(mux)
	h.ptyRoutes(mux)
	h.watchRoutes(mux)
	h.portRoutes(mux)
	h.restoreRoutes(mux)
	h.accountsRoutes(mux)
	h.envRoutes(mux)
	h.rootfsRoutes(mux)
	mux.Handle("/", h.adapt(func(w http.ResponseWriter, r *http.Request) error {
		return classErr(errdefs.ErrNotFound, "no route for %s %s", r.Method, r.URL.Path)
	}))
	return mux
}

// trackingWriter remembers whether the header went out, so the error
// adapter never writes an error document into a started body.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *trackingWriter) WriteHeader(code int) { w.wrote = true; w.ResponseWriter.WriteHeader(code) }
func (w *trackingWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}
func (w *trackingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom keeps http.response's buffered copy path reachable.
func (w *trackingWriter) ReadFrom(r io.Reader) (int64, error) {
	w.wrote = true
	return io.Copy(w.ResponseWriter, r)
}

func (h *handler) adapt(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		err := fn(tw, r)
		if err == nil {
			return
		}
		reqID := r.Header.Get("X-Request-Id")
		status, _ := errdefs.HTTPStatus(err)
		lvl := slog.LevelDebug
		if status >= 500 {
			lvl = slog.LevelWarn
		}
		h.log.Log(r.Context(), lvl, "request failed", "method", r.Method, "path", r.URL.Path, "requestId", reqID, "err", err)
		if tw.wrote {
			// Too late for an error document: break the response so the
			// client sees a failure instead of a short body that looks whole.
			panic(http.ErrAbortHandler)
		}
		errdefs.Write(w, err, reqID)
	})
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, wire.AgentHealth{
		Version: Version,
		PID:     os.Getpid(),
		Uptime:  time.Since(h.started).Milliseconds(),
		Leaving: Leaving(r.Context()),
	})
}

// classified is an error whose message is for people and whose class is for
// errdefs; it keeps messages free of the class's own text.
type classified struct {
	msg   string
	class error // nil: an internal error
	cause error // optional, kept for errors.Is/As
}

func (e *classified) Error() string { return e.msg }
func (e *classified) Unwrap() []error {
	var errs []error
	if e.class != nil {
		errs = append(errs, e.class)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

func classErr(class error, format string, args ...any) error {
	return &classified{msg: fmt.Sprintf(format, args...), class: class}
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// maxJSONBody bounds JSON request bodies; exec stdin rides in them.
const maxJSONBody = 64 << 20

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	return decodeJSONBytes(body, v)
}

func decodeJSONBytes(rd io.Reader, v any) error {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return classErr(errdefs.ErrTooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return errdefs.Invalid("body", "decode JSON: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("body", "trailing data after the JSON document")
	}
	return nil
}
