package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Background processes belong to the sandbox's agent: it starts them, keeps
// their logs and their exit status, and outlives the daemon. These handlers
// validate at the edge and pass through.

const (
	maxProcessBody = 1 << 20
	maxProcessName = 128
	minLogCap      = 1 << 10
	maxLogCap      = 1 << 30
)

// processIDPattern matches the ids the agent gives: a pid, with "-n" when
// the pid was used before.
var processIDPattern = regexp.MustCompile(`^[1-9][0-9]{0,9}(-[1-9][0-9]{0,5})?$`)

// processRoutes registers the routes of this feature.
func (s *Server) processRoutes() {
	s.handle("POST /v1/sandboxes/{id}/processes", s.startProcess)
	s.handle("GET /v1/sandboxes/{id}/processes", s.listProcesses)
	s.handle("GET /v1/sandboxes/{id}/processes/{pid}", s.getProcess)
	s.handle("DELETE /v1/sandboxes/{id}/processes/{pid}", s.removeProcess)
	s.handle("POST /v1/sandboxes/{id}/processes/{pid}/signal", s.signalProcess)
	s.handle("GET /v1/sandboxes/{id}/processes/{pid}/logs", s.processLogs)
}

// processPath validates the sandbox and process ids and returns the
// sandbox id and the agent path of the process plus rest.
func processPath(r *http.Request, rest string) (string, string, error) {
	id, err := pathID(r)
	if err != nil {
		return "", "", err
	}
	pid := r.PathValue("pid")
	if !processIDPattern.MatchString(pid) {
		// Nothing the agent gave out looks like this: it is unknown.
		return "", "", fmt.Errorf("process %q in sandbox %s: %w", clip(pid), id, errdefs.ErrNotFound)
	}
	return id, "/v1/processes/" + pid + rest, nil
}

func validateStartProcess(req *wire.StartProcessRequest) error {
	// The command fields are those of exec: one command spec checks them.
	ex := wire.ExecRequest{Command: req.Command, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd}
	if err := cmdspec.Exec(&ex, cmdspec.Defaults{}); err != nil {
		return err
	}
	req.Cwd = ex.Cwd
	if len(req.Name) > maxProcessName || !utf8.ValidString(req.Name) || strings.ContainsFunc(req.Name, isControl) {
		return errdefs.Invalid("name", "must be printable UTF-8 of at most %d bytes", maxProcessName)
	}
	if req.LogCapBytes != 0 && (req.LogCapBytes < minLogCap || req.LogCapBytes > maxLogCap) {
		return errdefs.Invalid("logCapBytes", "must be 0 (the default, 8 MiB) or between %d and %d", minLogCap, maxLogCap)
	}
	return nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.StartProcessRequest
	if err := readJSON(r, maxProcessBody, &req); err != nil {
		return err
	}
	if err := validateStartProcess(&req); err != nil {
		return err
	}
	return s.forwardJSON(w, r, id, "/v1/processes", req)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q := url.Values{}
	switch st := r.URL.Query().Get("state"); st {
	case "":
	case wire.ProcessRunning, wire.ProcessExited:
		q.Set("state", st)
	default:
		return errdefs.Invalid("state", "%q is not running or exited", clip(st))
	}
	if name := r.URL.Query().Get("name"); name != "" {
		if len(name) > maxProcessName {
			return errdefs.Invalid("name", "is longer than %d bytes", maxProcessName)
		}
		q.Set("name", name)
	}
	return s.forward(w, r, id, http.MethodGet, "/v1/processes", q, nil, 0, false)
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) error {
	id, p, err := processPath(r, "")
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodGet, p, nil, nil, 0, false)
}

func (s *Server) removeProcess(w http.ResponseWriter, r *http.Request) error {
	id, p, err := processPath(r, "")
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodDelete, p, nil, nil, 0, false)
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) error {
	id, p, err := processPath(r, "/signal")
	if err != nil {
		return err
	}
	var req wire.SignalRequest
	if err := readJSON(r, 4<<10, &req); err != nil {
		return err
	}
	n, ok := wire.ParseSignal(req.Signal)
	if !ok {
		return errdefs.Invalid("signal", "%q is not a signal name (TERM, SIGKILL, USR1, ...) or number (1-64)", clip(req.Signal))
	}
	// The agent gets the number: one spelling, whatever the client used.
	body, err := json.Marshal(wire.SignalRequest{Signal: strconv.Itoa(n)})
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodPost, p, nil, bytes.NewReader(body), int64(len(body)), false)
}

// parseProcessLogQuery validates the logs parameters: stream (stdout,
// stderr or both), offset (one stream), stdoutOffset and stderrOffset
// (both), follow.
func parseProcessLogQuery(in url.Values) (url.Values, error) {
	q := url.Values{}
	follow, err := parseBool("follow", in.Get("follow"))
	if err != nil {
		return nil, err
	}
	if follow {
		q.Set("follow", "true")
	}
	offsets := []string{"stdoutOffset", "stderrOffset"}
	switch st := in.Get("stream"); st {
	case wire.EventStdout, wire.EventStderr:
		q.Set("stream", st)
		offsets = []string{"offset"}
		if in.Has("stdoutOffset") || in.Has("stderrOffset") {
			return nil, errdefs.Invalid("offset", "with a single stream, give offset, not stdoutOffset or stderrOffset")
		}
	case "", "both":
		if in.Has("offset") {
			if _, err := parseNonNegative("offset", in.Get("offset")); err != nil {
				return nil, err
			}
			return nil, errdefs.Invalid("offset", "with both streams, give stdoutOffset and stderrOffset instead")
		}
	default:
		return nil, errdefs.Invalid("stream", "%q is not stdout, stderr or both", clip(st))
	}
	for _, f := range offsets {
		if !in.Has(f) {
			continue
		}
		raw := in.Get(f)
		if raw == "" {
			return nil, errdefs.Invalid(f, "is empty")
		}
		v, err := parseNonNegative(f, raw)
		if err != nil {
			return nil, err
		}
		q.Set(f, strconv.FormatInt(v, 10))
	}
	return q, nil
}

func (s *Server) processLogs(w http.ResponseWriter, r *http.Request) error {
	id, p, err := processPath(r, "/logs")
	if err != nil {
		return err
	}
	q, err := parseProcessLogQuery(r.URL.Query())
	if err != nil {
		return err
	}
	// Always flushed: a follow is live, and a plain read can be large.
	return s.forward(w, r, id, http.MethodGet, p, q, nil, 0, true)
}
