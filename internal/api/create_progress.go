package api

import (
	"net/http"

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
// exactly one sandbox or stream.error line. Once the 200 is out the error
// can only travel on the stream, so its code is the one the plain create
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
	// client that hangs up does not leave half a sandbox. The goroutine
	// lives no longer than Manager.Create, which registers with the
	// daemon's operations before it touches anything: the shutdown waits
	// for it (and one that starts after the shutdown began is refused).
	go func() {
		sb, err := s.opts.Manager.Create(r.Context(), req, co)
		done <- createResult{sb, err}
	}()

	st := s.startStream(w, r, http.StatusOK, createKeepalive, func() any { return wire.CreateEvent{Type: wire.CreateEventKeepalive} })
	defer st.Close()
	for {
		select {
		case msg := <-msgs:
			if st.Send(wire.CreateEvent{Type: wire.CreateEventProgress, Message: msg}) != nil {
				return nil // the create goes on; nobody is left to tell
			}
		case <-st.Context().Done():
			return nil // the create goes on; nobody is left to tell
		case res := <-done:
			// Progress is reported synchronously, so every line of this
			// create is queued by now: flush them before the end.
			for drained := false; !drained; {
				select {
				case msg := <-msgs:
					if st.Send(wire.CreateEvent{Type: wire.CreateEventProgress, Message: msg}) != nil {
						return nil
					}
				default:
					drained = true
				}
			}
			if res.err != nil {
				_ = st.Fail(res.err)
				return reported(res.err) // the adapter logs it; the stream told the client
			}
			_ = st.End(wire.CreateEvent{Type: wire.CreateEventSandbox, Sandbox: &res.sb})
			return nil
		}
	}
}
