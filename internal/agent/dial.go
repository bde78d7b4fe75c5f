package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/driver"
)

// DefaultDialFile is where a driver puts the TCP channel's dial file.
const DefaultDialFile = driver.RunDir + "/" + driver.AgentDialFile

// A dial tries each of the dial file's addresses in turn, so each must
// fail fast when its daemon is gone: a refused connect costs nothing, and
// a silent address (a dead host whose packets are dropped) costs
// the connect timeout before the next is tried. The TLS handshake and
// the hello then have a bound of their own.
type dialTimeouts struct{ connect, handshake time.Duration }

// defaultDialTimeouts: a connect survives one lost SYN (sent again after
// 1 s); the handshake and hello have what the daemon gives them.
var defaultDialTimeouts = dialTimeouts{connect: 3 * time.Second, handshake: 5 * time.Second}

// Dialer opens one connection to the daemon.
type Dialer func(ctx context.Context) (net.Conn, error)

// UnixDialer dials the daemon's socket in the run dir.
func UnixDialer(socket string) Dialer {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "unix", socket)
	}
}

// LoadDial reads a dial file; a missing one is os.ErrNotExist.
func LoadDial(path string) (driver.AgentDial, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return driver.AgentDial{}, err
	}
	return parseDial(path, data)
}

func parseDial(path string, data []byte) (driver.AgentDial, error) {
	var d driver.AgentDial
	if err := json.Unmarshal(data, &d); err != nil {
		return driver.AgentDial{}, fmt.Errorf("decode %s: %w", path, err)
	}
	if len(d.Addresses()) == 0 || d.CertPEM == "" {
		return driver.AgentDial{}, fmt.Errorf("%s: addr and cert are required", path)
	}
	for _, a := range d.Addresses() {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return driver.AgentDial{}, fmt.Errorf("%s: address %q: %w", path, a, err)
		}
	}
	return d, nil
}

// TLSDialer dials the daemon's agent listener over TCP, verifies the
// daemon by the pinned certificate alone, and says which sandbox it serves
// with its credential. The credential is written only after the daemon
// proved it holds the pinned key.
//
// With several addresses (the daemons of a set) one dial tries them in
// turn until one connects, starting after the one the last session came
// from: when a session ends because its daemon died, the agent's next
// dial goes to another daemon first rather than waiting on the dead one.
// With one address every dial goes there.
func TLSDialer(d driver.AgentDial) (Dialer, error) {
	return tlsDialer(d, defaultDialTimeouts)
}

func tlsDialer(d driver.AgentDial, to dialTimeouts) (Dialer, error) {
	addrs := d.Addresses()
	if len(addrs) == 0 {
		return nil, errors.New("agent dial: no address")
	}
	conf, err := agentauth.ClientConfig([]byte(d.CertPEM))
	if err != nil {
		return nil, err
	}
	hello, err := agentauth.Hello{Sandbox: d.Sandbox, Token: d.Token}.Marshal()
	if err != nil {
		return nil, err
	}
	one := func(ctx context.Context, addr string) (net.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, to.connect)
		nc, err := (&net.Dialer{KeepAlive: 15 * time.Second}).DialContext(cctx, "tcp", addr)
		cancel()
		if err != nil {
			return nil, err
		}
		hctx, cancel := context.WithTimeout(ctx, to.handshake)
		defer cancel()
		c := tls.Client(nc, conf)
		if err := c.HandshakeContext(hctx); err != nil {
			nc.Close()
			return nil, err
		}
		if dl, ok := hctx.Deadline(); ok {
			_ = c.SetWriteDeadline(dl)
		}
		if _, err := c.Write(hello); err != nil {
			c.Close()
			return nil, fmt.Errorf("send agent hello: %w", err)
		}
		_ = c.SetWriteDeadline(time.Time{})
		// TCP_NODELAY is Go's default: small yamux frames go out at once.
		return c, nil
	}
	var next atomic.Int64 // the index of the address to try first
	return func(ctx context.Context) (net.Conn, error) {
		start := int(next.Load())
		var errs []error
		for i := range addrs {
			k := (start + i) % len(addrs)
			// Whatever this address does, the next dial starts after
			// it: after a failure so that a dial cut short by its
			// context (FallbackConn.Retry) still moves on, after a
			// success so that the session's end moves on.
			next.Store(int64((k + 1) % len(addrs)))
			c, err := one(ctx, addrs[k])
			if err == nil {
				return c, nil
			}
			errs = append(errs, fmt.Errorf("dial %s: %w", addrs[k], err))
			if ctx.Err() != nil {
				break
			}
		}
		return nil, errors.Join(errs...)
	}, nil
}

// FallbackDialer tries first and, when it fails to connect, second: an
// agent told to dial over TCP still reaches a daemon that also listens on
// the run dir's socket when its box has no route to the TCP listener (a
// box whose egress was set to none is cut off every network). A
// connection from second is a FallbackConn whose Retry says when first
// answers again.
func FallbackDialer(first, second Dialer) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		c, err := first(ctx)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		c, err2 := second(ctx)
		if err2 == nil {
			return &FallbackConn{Conn: c, first: first}, nil
		}
		return nil, errors.Join(err, err2)
	}
}

// FallbackConn is a session's connection that came by the fallback. An
// agent that fell back only because the daemon was restarting (its TCP
// listener, or the firewall rule for a new port, not up yet) or because its
// box had no network for a while would stay on the socket for good; the
// agent tries the first way now and then (successor) and moves its session
// there once it connects.
type FallbackConn struct {
	net.Conn
	first Dialer
}

// fallbackRetry is how often a fallback session tries the first way.
const fallbackRetry = 3 * time.Second

// successor tries the first way every fallbackRetry until it connects,
// and returns that connection (nil when ctx ends first). During each try
// the session s on the fallback says it is leaving, so that the daemon,
// which checks a session that is up before it takes a newcomer over TCP,
// takes this one.
func (c *FallbackConn) successor(ctx context.Context, s *session) net.Conn {
	t := time.NewTicker(fallbackRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.leave(true)
		nc, err := c.first(ctx)
		if err == nil {
			return nc
		}
		s.leave(false)
	}
}

// FileDialer reads dialFile at every attempt: when it is there, it dials
// over TCP with TLS as the file says and falls back to the socket; when it
// is not (or is bad, which it logs), the socket alone. Reading it each time
// lets the daemon move the listener, or turn the TCP channel on or off,
// for boxes that are running: their agents take the new file at their
// next redial (a daemon restart ends every session).
func FileDialer(dialFile, socket string, logger *slog.Logger) Dialer {
	unix := UnixDialer(socket)
	var (
		mu   sync.Mutex
		last []byte
		tcp  Dialer
	)
	return func(ctx context.Context) (net.Conn, error) {
		data, err := os.ReadFile(dialFile)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				logger.Warn("read the agent dial file; dialing the socket", "path", dialFile, "err", err)
			}
			return unix(ctx)
		}
		mu.Lock()
		if !bytes.Equal(data, last) {
			last, tcp = data, nil
			d, err := parseDial(dialFile, data)
			if err == nil {
				tcp, err = TLSDialer(d)
			}
			if err != nil {
				logger.Warn("bad agent dial file; dialing the socket", "path", dialFile, "err", err)
			} else {
				logger.Debug("dialing the daemon over TCP", "addrs", d.Addresses())
			}
		}
		dial := tcp
		mu.Unlock()
		if dial == nil {
			return unix(ctx)
		}
		return FallbackDialer(dial, unix)(ctx)
	}
}
