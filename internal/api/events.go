package api

import (
	"net/http"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// eventKeepalive is how often a quiet event stream sends a keepalive line.
const eventKeepalive = 15 * time.Second

// sandboxEvents lists a sandbox's events, or with follow=true streams them
// as NDJSON: the backlog after since, then new ones as they are logged,
// keepalives while nothing happens, and a final "end" line when the sandbox
// is destroyed or the daemon shuts down (or a stream.error line if the log
// cannot be read). A sandbox event of type "error" is a sandbox's failure,
// never the stream's.
func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	return s.events(w, r, id)
}

// hostEvents is sandboxEvents for every sandbox of the daemon.
func (s *Server) hostEvents(w http.ResponseWriter, r *http.Request) error {
	return s.events(w, r, "")
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, id string) error {
	q := r.URL.Query()
	since, err := parseNonNegative("since", q.Get("since"))
	if err != nil {
		return err
	}
	limit, err := parseNonNegative("limit", q.Get("limit"))
	if err != nil {
		return err
	}
	if limit > 1000 {
		return errdefs.Invalid("limit", "must be at most 1000, got %d", limit)
	}
	follow, err := parseBool("follow", q.Get("follow"))
	if err != nil {
		return err
	}
	lm, err := s.lifecycle()
	if err != nil {
		return err
	}
	if !follow {
		evs, err := lm.Events(r.Context(), id, since, int(limit))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wire.SandboxEventList{Events: evs})
		return nil
	}

	// Subscribe before the first read so that nothing logged in between is
	// missed; the stream then re-reads from its last seq on each wake-up.
	wake, unsubscribe := lm.SubscribeEvents()
	defer unsubscribe()
	evs, err := lm.Events(r.Context(), id, since, 0)
	if err != nil {
		return err // not found: still a plain error response
	}
	st := s.startStream(w, r, http.StatusOK, eventKeepalive, func() any {
		return wire.SandboxEvent{Type: wire.SandboxEventKeepalive, Time: time.Now().UTC()}
	})
	defer st.Close()
	end := func(msg string) {
		_ = st.End(wire.SandboxEvent{Type: wire.SandboxEventEnd, SandboxID: id, Time: time.Now().UTC(), Message: msg})
	}
	for {
		for _, ev := range evs {
			if st.Send(ev) != nil {
				return nil // the client left or stopped reading
			}
			since = ev.Seq
			if id != "" && ev.Type == wire.SandboxEventDestroyed {
				end("the sandbox was destroyed")
				return nil
			}
		}
		select {
		case <-st.Context().Done():
			return nil
		case <-lm.Closing():
			end("the daemon is shutting down")
			return nil
		case <-wake:
		}
		evs, err = lm.Events(st.Context(), id, since, 0)
		if err != nil {
			if st.Context().Err() != nil {
				return nil
			}
			_ = st.Fail(err)
			return reported(err)
		}
	}
}
