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
	sess, err := yamux.Server(conn, YamuxConfig())
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("serve agent channel: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		// Cancel in-flight requests (and so kill their execs) with ctx.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    log.New(io.Discard, "", 0),
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	err = srv.Serve(sess)
	_ = srv.Close()
	_ = sess.Close()
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) {
		return fmt.Errorf("serve agent channel: session closed")
	}
	return fmt.Errorf("serve agent channel: %w", err)
}

// retryFirst ends a session that came by the fallback (FallbackConn) once
// the preferred way connects again, so the agent redials by it. It
// returns a func that stops the checks.
func retryFirst(ctx context.Context, conn net.Conn, log *slog.Logger) (stop func()) {
	fc, ok := conn.(*FallbackConn)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(fallbackRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if fc.Retry(ctx) {
				log.Debug("the preferred channel answers again; leaving the fallback")
				fc.Close()
				return
			}
		}
	}()
	return func() { cancel(); <-done }
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
	for {
		conn, err := dial(ctx)
		if err == nil {
			log.Debug("connected to daemon", "addr", conn.RemoteAddr().String())
			started := time.Now()
			stop := retryFirst(ctx, conn, log)
			err = Serve(ctx, conn, h)
			stop()
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
