// Package agentconntest serves test agents on the daemon's agent channel:
// an http.Handler on the agent's end of a connection, multiplexed with
// yamux as cmd/hotcell-agent serves its API, so that tests of the daemon
// side (agentconn, api) can answer as any agent, a hostile one included.
package agentconntest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/wire"
)

// Serve serves h on nc, the agent's end of an agent connection, until the
// test ends, and returns the agent's yamux session (close it to make the
// agent go away). h serves every path; Healthy answers the health check.
func Serve(t testing.TB, nc net.Conn, h http.Handler) *yamux.Session {
	t.Helper()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	sess, err := yamux.Server(nc, cfg)
	if err != nil {
		t.Fatalf("agent side of the channel: %v", err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(sess)
	}()
	t.Cleanup(func() {
		srv.Close()
		sess.Close()
		<-done
	})
	return sess
}

// Healthy wraps h with the health check the daemon asks a new agent
// connection before it uses it, answering with health.
func Healthy(health wire.AgentHealth, h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(health)
	})
	mux.Handle("/", h)
	return mux
}
