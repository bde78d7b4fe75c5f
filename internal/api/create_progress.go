package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// createKeepalive is how often a quiet create stream sends a keepalive
// line; a variable so that tests need not wait 15 s.
var createKeepalive = eventKeepalive

// createProgressBuffer bounds the progress lines queued for a slow client.
// Lines past it are dropped rather than stall the create (an image pull
// reports as fast as it goes); the final line is never dropped.
const createProgressBuffer = 256

type createResult struct {
	sb  wire.Sandbox
	err error
}

// createStream runs a validated create and streams it as NDJSON: progress
// lines as the manager reports them, keepalives while it is quiet, then
// exactly one sandbox or error line. Once the 200 is out the error can
// only travel on the stream, so its code is the one the plain create
// would have answered with.
func (s *Server) createStream(w http.ResponseWriter, r *http.Request, req wire.CreateSandboxRequest, co sandbox.CreateOptions) error {
	msgs := make(chan string, createProgressBuffer)
	done := make(chan createResult, 1) // buffered: the create never waits for a gone client
	co.Progress = func(msg string) {
		select {
		case msgs <- msg:
		default:
		}
	}
	// The create owns its goroutine and ends on its own: the manager bounds
	// every step and detaches from r's context once the box exists, so a
	// client that hangs up does not leave half a sandbox.
	go func() {
		sb, err := s.opts.Manager.Create(r.Context(), req, co)
		done <- createResult{sb, err}
	}()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(ev wire.CreateEvent) error {
		if err := enc.Encode(ev); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := rc.Flush(); err != nil {
		return err
	}
	keepalive := time.NewTicker(createKeepalive)
	defer keepalive.Stop()
	for {
		select {
		case msg := <-msgs:
			if err := send(wire.CreateEvent{Type: wire.CreateEventProgress, Message: msg}); err != nil {
				return err
			}
		case <-keepalive.C:
			if err := send(wire.CreateEvent{Type: wire.CreateEventKeepalive}); err != nil {
				return err
			}
		case <-r.Context().Done():
			return nil // the create goes on; nobody is left to tell
		case res := <-done:
			// Progress is reported synchronously, so every line of this
			// create is queued by now: flush them before the end.
			for drained := false; !drained; {
				select {
				case msg := <-msgs:
					if err := send(wire.CreateEvent{Type: wire.CreateEventProgress, Message: msg}); err != nil {
						return err
					}
				default:
					drained = true
				}
			}
			if res.err != nil {
				rid, _ := r.Context().Value(requestIDKey{}).(string)
				detail := errorDetail(res.err, rid)
				if err := send(wire.CreateEvent{Type: wire.CreateEventError, Error: &detail}); err != nil {
					return errors.Join(res.err, err)
				}
				return res.err // the adapter logs it; the stream already told the client
			}
			return send(wire.CreateEvent{Type: wire.CreateEventSandbox, Sandbox: &res.sb})
		}
	}
}

// errorDetail is the {"code","message"} errdefs.Write would have answered
// err with, for errors that travel on a stream.
func errorDetail(err error, requestID string) errdefs.Detail {
	status, code := errdefs.HTTPStatus(err)
	msg := err.Error()
	var re *errdefs.RemoteError
	if errors.As(err, &re) {
		msg = re.Message
	}
	if status == http.StatusInternalServerError && requestID != "" {
		msg = "internal error (request " + requestID + "): " + msg
	}
	return errdefs.Detail{Code: code, Message: msg, RequestID: requestID}
}
