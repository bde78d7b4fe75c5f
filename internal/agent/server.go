package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/driver"
)

// YamuxConfig is the session configuration both ends of the agent channel
// use. Keepalives notice a dead peer (a daemon gone without closing).
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.LogOutput = io.Discard
	return cfg
}

// Serve serves h on conn, the agent's end of the channel: the agent is the
// yamux server and every daemon request arrives as a new stream. It returns
// when the session ends or ctx is done (then with nil). Requests still
// running are cancelled either way.
func Serve(ctx context.Context, conn net.Conn, h http.Handler) error {
	return newSession(ctx, h).serve(conn)
}

// session is the agent's end of one session with the daemon.
type session struct {
	ctx context.Context
	srv *http.Server
	// leaving is set while the agent is handing the daemon over to a new
	// session (FallbackConn.successor): the health check says so, which is what
	// lets the daemon take the newcomer while this one still answers.
	leaving atomic.Bool
}

type sessionKey struct{}

// Leaving reports whether the session a request came on is being left
// for another: the health check's Leaving.
func Leaving(ctx context.Context) bool {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s != nil && s.leaving.Load()
}

func newSession(ctx context.Context, h http.Handler) *session {
	s := &session{ctx: ctx}
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		// Cancel in-flight requests (and so kill their execs) with ctx.
		BaseContext: func(net.Listener) context.Context { return context.WithValue(ctx, sessionKey{}, s) },
		ErrorLog:    log.New(io.Discard, "", 0),
	}
	return s
}

// leave says whether the session is being left. Nothing else changes
// here: the session serves what comes on it until the daemon, which moves
// its new calls to the new session and closes its idle streams on this
// one, closes it once it is empty. (Ending streams from this side, as
// turning keep-alives off does, raced with the daemon sending its next
// call on a stream it had kept idle: that call failed with EOF.)
func (s *session) leave(yes bool) {
	s.leaving.Store(yes)
}

func (s *session) serve(conn net.Conn) error {
	sess, err := yamux.Server(conn, YamuxConfig())
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("serve agent channel: %w", err)
	}
	stop := context.AfterFunc(s.ctx, func() { _ = s.srv.Close() })
	defer stop()
	err = s.srv.Serve(sess)
	_ = s.srv.Close()
	_ = sess.Close()
	if s.ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) {
		return fmt.Errorf("serve agent channel: session closed")
	}
	return fmt.Errorf("serve agent channel: %w", err)
}

// serveSession serves h on conn until its session ends. A session that
// came by the fallback (FallbackConn) is left as soon as the preferred way
// connects again: serveSession then returns that connection at once, and
// the old session goes on in the background serving the calls it has
// (an exec, a terminal) until the daemon, which has moved its new calls
// to the new session, closes it. Nothing running is cut by the move.
func serveSession(ctx context.Context, conn net.Conn, h http.Handler, log *slog.Logger) (next net.Conn, err error) {
	s := newSession(ctx, h)
	fc, ok := conn.(*FallbackConn)
	if !ok {
		return nil, s.serve(conn)
	}
	done := make(chan error, 1)
	go func() { done <- s.serve(conn) }()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make(chan net.Conn, 1)
	go func() { found <- fc.successor(sctx, s) }()
	select {
	case err = <-done:
		cancel()
		// A successor found as the session ended is as good as a dial.
		if nc := <-found; nc != nil {
			return nc, nil
		}
		return nil, err
	case nc := <-found:
		if nc == nil {
			return nil, <-done
		}
		log.Debug("the preferred channel answers again; leaving the fallback", "addr", nc.RemoteAddr().String())
		return nc, nil
	}
}

// DefaultSocket is where the daemon listens for its agent, inside the sandbox.
const DefaultSocket = driver.RunDir + "/" + driver.AgentSocket

const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// Run dials the daemon's socket and serves h on each connection it gets,
// redialing with backoff whenever the dial fails or the session ends (the
// daemon restarted), until ctx is done. It returns nil on ctx's end.
func Run(ctx context.Context, socket string, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	return RunDialer(ctx, UnixDialer(socket), h, logger.With("socket", socket))
}

// RunDialer is Run with any way of reaching the daemon (TLSDialer for the
// channel over TCP).
func RunDialer(ctx context.Context, dial Dialer, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	log := logger.With("component", "agent")
	backoff := minBackoff
	var next net.Conn // a connection serveSession found for the next session
	for {
		conn, err := next, error(nil)
		if next = nil; conn == nil {
			conn, err = dial(ctx)
		}
		if err == nil {
			log.Debug("connected to daemon", "addr", conn.RemoteAddr().String())
			started := time.Now()
			next, err = serveSession(ctx, conn, h, log)
			if next != nil {
				backoff = minBackoff
				continue
			}
			if time.Since(started) > maxBackoff {
				backoff = minBackoff // a session that lived was a success
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Debug("agent channel down", "err", err, "retryIn", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}
