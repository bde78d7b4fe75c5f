package agent

import (
	"fmt"
	"net/http"
	"net/url"
	"syscall"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/ndjson"
	"github.com/hotcell/hotcell/internal/wire"
)

// procService serves background processes: start, list, get, signal,
// remove, and their logs, read whole, from an offset, or followed.
type procService struct {
	h     *handler
	table *procTable
}

// processRoutes registers the routes of this service.
func (h *handler) processRoutes(mux *http.ServeMux) {
	dir := h.opts.ProcDir
	if dir == "" {
		dir = defaultProcDir
	}
	s := &procService{h: h, table: newProcTable(dir, h.reaper, h.log.With("service", "processes"))}
	mux.Handle("POST /v1/processes", h.adapt(s.start))
	mux.Handle("GET /v1/processes", h.adapt(s.list))
	mux.Handle("GET /v1/processes/{pid}", h.adapt(s.get))
	mux.Handle("DELETE /v1/processes/{pid}", h.adapt(s.remove))
	mux.Handle("POST /v1/processes/{pid}/signal", h.adapt(s.signal))
	mux.Handle("GET /v1/processes/{pid}/logs", h.adapt(s.logs))
}

func (s *procService) start(w http.ResponseWriter, r *http.Request) error {
	var req wire.StartProcessRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.LogCapBytes != 0 && (req.LogCapBytes < minLogCap || req.LogCapBytes > maxLogCap) {
		return errdefs.Invalid("logCapBytes", "must be 0 (default %d) or between %d and %d", defaultLogCap, minLogCap, maxLogCap)
	}
	spec, err := parseExec(s.h.workspace, wire.ExecRequest{Command: req.Command, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd})
	if err != nil {
		return err
	}
	p, err := s.table.start(s.h, spec, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, p)
}

func (s *procService) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	state := q.Get("state")
	switch state {
	case "", wire.ProcessRunning, wire.ProcessExited:
	default:
		return errdefs.Invalid("state", "%q is not running or exited", clipID(state))
	}
	return writeJSON(w, http.StatusOK, wire.ProcessList{Processes: s.table.list(state, q.Get("name"))})
}

func (s *procService) get(w http.ResponseWriter, r *http.Request) error {
	p, err := s.table.get(r.PathValue("pid"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p.snapshot())
}

func (s *procService) remove(w http.ResponseWriter, r *http.Request) error {
	p, err := s.table.get(r.PathValue("pid"))
	if err != nil {
		return err
	}
	if err := s.table.remove(p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *procService) signal(w http.ResponseWriter, r *http.Request) error {
	var req wire.SignalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	n, ok := wire.ParseSignal(req.Signal)
	if !ok {
		return errdefs.Invalid("signal", "%q is not a signal name (TERM, SIGKILL, ...) or number (1-64)", clipID(req.Signal))
	}
	p, err := s.table.get(r.PathValue("pid"))
	if err != nil {
		return err
	}
	if err := s.table.signal(p, syscall.Signal(n)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// logQuery is a validated logs request.
type logQuery struct {
	streams []string         // stdout and/or stderr, in this order
	offsets map[string]int64 // where each stream starts
	follow  bool
}

// parseLogQuery reads stream (stdout, stderr or both), offset (for one
// stream), stdoutOffset and stderrOffset (for both) and follow.
func parseLogQuery(q url.Values) (logQuery, error) {
	lq := logQuery{offsets: map[string]int64{}}
	var err error
	if lq.follow, err = queryBool(q, "follow"); err != nil {
		return lq, err
	}
	switch st := q.Get("stream"); st {
	case wire.EventStdout, wire.EventStderr:
		lq.streams = []string{st}
		if q.Has("stdoutOffset") || q.Has("stderrOffset") {
			return lq, errdefs.Invalid("offset", "with a single stream, give offset, not stdoutOffset or stderrOffset")
		}
		if lq.offsets[st], err = queryInt64(q, "offset", 0); err != nil {
			return lq, err
		}
	case "", "both":
		lq.streams = []string{wire.EventStdout, wire.EventStderr}
		if q.Has("offset") {
			if _, err := queryInt64(q, "offset", 0); err != nil {
				return lq, err
			}
			return lq, errdefs.Invalid("offset", "with both streams, give stdoutOffset and stderrOffset instead")
		}
		for _, st := range lq.streams {
			if lq.offsets[st], err = queryInt64(q, st+"Offset", 0); err != nil {
				return lq, err
			}
		}
	default:
		return lq, errdefs.Invalid("stream", "%q is not stdout, stderr or both", clipID(st))
	}
	return lq, nil
}

// logs streams a process's output as NDJSON LogEvents: the bytes from the
// asked offsets on, a gap event where rotation dropped bytes first, then,
// without follow, "end" (or "exit" if the process has finished); with
// follow, new output as it is written, keepalives while there is none, and
// "exit" once the process has finished and its output is sent.
func (s *procService) logs(w http.ResponseWriter, r *http.Request) error {
	lq, err := parseLogQuery(r.URL.Query())
	if err != nil {
		return err
	}
	p, err := s.table.get(r.PathValue("pid"))
	if err != nil {
		return err
	}
	for _, st := range lq.streams {
		if _, total, _, _ := p.stream(st).bounds(); lq.offsets[st] > total {
			field := "offset"
			if len(lq.streams) > 1 {
				field = st + "Offset"
			}
			return errdefs.Invalid(field, "%d is past the end of %s (%d bytes so far)", lq.offsets[st], st, total)
		}
	}

	out := ndjson.Start(w, r, ndjson.Options{
		WriteTimeout:   streamWriteDeadline,
		Keepalive:      s.h.opts.Keepalive,
		KeepaliveEvent: func() any { return wire.LogEvent{Type: wire.EventKeepalive} },
		RequestID:      r.Header.Get("X-Request-Id"),
	})
	defer out.Close()
	bp := getBuf()
	defer putBuf(bp)
	for {
		changed := p.wait()
		// Read the state before the data: what was written before the
		// process finished is then surely sent before its exit event.
		st := p.state()
		for _, name := range lq.streams {
			if err := s.sendStream(p, name, lq.offsets, *bp, out); err != nil {
				return nil // the client is gone, or the stream told it why it ends
			}
		}
		if final, done, failure := finalEvent(p, st, lq.follow, lq.offsets); failure != nil {
			_ = out.Fail(failure)
			return nil
		} else if done {
			_ = out.End(final)
			return nil
		}
		select {
		case <-changed:
		case <-out.Context().Done():
			return nil
		}
	}
}

// sendStream sends what stream name has from offsets[name] on, advancing it.
func (s *procService) sendStream(p *bgProc, name string, offsets map[string]int64, buf []byte, out *ndjson.Writer) error {
	l := p.stream(name)
	for {
		off := offsets[name]
		n, at, err := l.readAt(off, buf)
		if err != nil {
			s.table.log.Warn("read process log", "id", p.id, "stream", name, "err", err)
			err = fmt.Errorf("read the %s log of process %s: %w", name, p.id, err)
			_ = out.Fail(err)
			return err
		}
		if at > off {
			if err := out.Send(wire.LogEvent{Type: wire.EventGap, Stream: name, Offset: at, Dropped: at - off}); err != nil {
				return err
			}
			offsets[name] = at
		}
		if n == 0 {
			return nil
		}
		if err := out.Send(wire.LogEvent{Type: name, Offset: at, Data: buf[:n]}); err != nil {
			return err
		}
		offsets[name] = at + int64(n)
	}
}

// finalEvent says whether the stream ends now, and with what: an event, or
// a failure. Its sizes are where the sent streams stopped (a child left
// behind may write more).
func finalEvent(p *bgProc, st procState, follow bool, offsets map[string]int64) (wire.LogEvent, bool, error) {
	_, out, _, _ := p.stdout.bounds()
	_, errb, _, _ := p.stderr.bounds()
	if off, ok := offsets[wire.EventStdout]; ok {
		out = off
	}
	if off, ok := offsets[wire.EventStderr]; ok {
		errb = off
	}
	switch {
	case st.removed:
		return wire.LogEvent{}, true, fmt.Errorf("process %s was removed: %w", p.id, errdefs.ErrNotFound)
	case st.finished:
		ev := wire.LogEvent{Type: wire.EventExit, StdoutBytes: out, StderrBytes: errb, Message: st.lostErr}
		if st.status != nil {
			ev.ExitCode = st.status.Code
			ev.Signal = st.status.SignalName()
		}
		return ev, true, nil
	case !follow:
		return wire.LogEvent{Type: wire.EventEnd, StdoutBytes: out, StderrBytes: errb}, true, nil
	}
	return wire.LogEvent{}, false, nil
}
