// Package agentconn is the daemon's side of the agent channel: it listens on
// the unix socket in one sandbox's run dir, accepts the agent's connection,
// multiplexes it with yamux and sends HTTP requests to the agent, one stream
// each. It owns one sandbox's session at a time.
//
// The channel is a trust boundary: sandbox code runs as root and can dial
// the socket and play agent. So one connection at a time may be in its
// handshake and one session may be live (others are closed at once), the
// agent cannot open streams, every answer read here is capped to what it
// needs, all decodes of one sandbox's answers share a budget, and log lines
// a sandbox causes are rate-limited.
package agentconn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sync/semaphore"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/loglimit"
	"github.com/hotcell/hotcell/internal/wire"
)

// Caps on what is read from an agent, each sized to the answer it bounds:
// whatever comes out of a sandbox is untrusted.
const (
	// maxHealth bounds the health check's answer (a version and two numbers).
	maxHealth = 4 << 10
	// maxJSON bounds a DoJSON answer: disk usage and other small documents.
	maxJSON = 64 << 10
	// maxErrorBody bounds an error document read through Do.
	maxErrorBody = 16 << 10
	// maxProcessList and maxProcesses bound a process list: its bytes, and
	// the entries it may have.
	maxProcessList = 2 << 20
	maxProcesses   = 4096
	// decodeBudget is what all decodes of one sandbox's answers may hold at
	// once: each reserves its cap before it reads.
	decodeBudget = 4 << 20
	// maxHeaderBytes bounds an answer's status line and headers
	// (net/http's default is 10 MB).
	maxHeaderBytes = 16 << 10
	// handshakeTimeout bounds a new connection's handshake: the health
	// check and every read and write on the connection until it is adopted.
	handshakeTimeout = 5 * time.Second
)

// sandboxLog rate-limits the log lines one sandbox's connections cause, keyed
// by sandbox id.
var sandboxLog = loglimit.New(10, time.Minute)

// Conn is the daemon's connection to one sandbox's agent. The agent may come
// and go (restart, container stop); requests wait for it up to their context.
type Conn struct {
	id  string
	log *slog.Logger

	// lns are the listeners agents come in on: the run dir's socket, and
	// the TCP channel's route for this sandbox (AddListener).
	lnMu     sync.Mutex
	lns      []net.Listener
	lnClosed bool
	// accepting counts the accept loops, which Close waits for.
	accepting sync.WaitGroup

	mu      sync.Mutex
	sess    *yamux.Session
	guard   *guard // sess's
	health  wire.AgentHealth
	readyCh chan struct{} // closed while a healthy session is up
	closed  bool
	// draining is a session its agent left, kept until the calls it
	// carries are done (drain).
	draining *yamux.Session

	transport *http.Transport
	client    *http.Client
	// pending is set while a connection is in its handshake; others that
	// come meanwhile are closed at once.
	pending atomic.Bool
	// refused counts connections closed at once or cut by the guard.
	refused atomic.Int64
	// budget is shared by all decodes of this sandbox's answers.
	budget *semaphore.Weighted
	// handshakeTimeout is the const; tests shorten it.
	handshakeTimeout time.Duration
	// closeTimeout is the sessions' StreamCloseTimeout
	// (streamCloseTimeout); tests lengthen it.
	closeTimeout time.Duration
	// adopting ends the health checks of connections being adopted when
	// the Conn closes; adopts counts their goroutines, which Close waits
	// for.
	adopting context.Context
	stop     context.CancelFunc
	adopts   sync.WaitGroup
	// onConnect, when set, runs on every new session before it serves.
	onConnect atomic.Pointer[ConnectHook]
}

// ConnectHook runs on each new agent session after its health check and
// before any request of the daemon's may use it; rt reaches the agent on
// that session. An error refuses the session (the agent dials again).
type ConnectHook func(ctx context.Context, rt http.RoundTripper) error

// OnConnect sets the hook every later session runs before it serves; nil
// removes it. A session that is up already does not run it.
func (c *Conn) OnConnect(h ConnectHook) {
	if h == nil {
		c.onConnect.Store(nil)
		return
	}
	c.onConnect.Store(&h)
}

// Listen removes a stale socket at path, listens on it and starts accepting
// agent connections in the background until Close.
func Listen(id, path string, log *slog.Logger) (*Conn, error) {
	return listen(id, path, log, handshakeTimeout)
}

func listen(id, path string, log *slog.Logger, handshake time.Duration) (*Conn, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale agent socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on agent socket: %w", err)
	}
	// Only root (the agent, PID 1 in the box) may connect, not a user process
	// inside the sandbox.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod agent socket: %w", err)
	}
	c := makeConn(id, log, handshake)
	c.lns = []net.Listener{ln}
	c.accepting.Add(1)
	go c.acceptLoop(ln, false)
	return c, nil
}

// New returns a Conn for sandbox id that accepts agents only from the
// listeners AddListener gives it: a sandbox on another host, whose box
// sees no run dir of the daemon's, is reached through a Channel route.
func New(id string, log *slog.Logger) *Conn {
	return makeConn(id, log, handshakeTimeout)
}

func makeConn(id string, log *slog.Logger, handshake time.Duration) *Conn {
	c := &Conn{
		id:      id,
		log:     log.With("sandbox", id),
		readyCh: make(chan struct{}),
		budget:  semaphore.NewWeighted(decodeBudget),

		handshakeTimeout: handshake,
		closeTimeout:     streamCloseTimeout,
	}
	c.adopting, c.stop = context.WithCancel(context.Background())
	c.transport = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return c.openStream(ctx) },
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// Responses are streamed; the agent answers headers promptly.
		ResponseHeaderTimeout:  0,
		WriteBufferSize:        64 << 10,
		ReadBufferSize:         64 << 10,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	c.client = &http.Client{Transport: c.transport}
	return c
}

// AddListener accepts agent connections from ln too, until Close (which
// closes ln). keepLive says what a connection from ln does to a session
// that is up: with keepLive a session that answers a health check within
// liveCheckTimeout stays and the newcomer is refused, and only a session
// that does not (its agent restarted, its network went) or whose agent
// says it is leaving it (for the newcomer: current) is replaced. The
// TCP channel uses it: a credential that leaked out of its box (it is
// reachable from the network) must not let anyone take the rightful
// agent's session away.
func (c *Conn) AddListener(ln net.Listener, keepLive bool) error {
	c.lnMu.Lock()
	if c.lnClosed {
		c.lnMu.Unlock()
		ln.Close()
		return fmt.Errorf("agent connection of sandbox %s is closed: %w", c.id, errdefs.ErrUnavailable)
	}
	c.lns = append(c.lns, ln)
	c.accepting.Add(1)
	c.lnMu.Unlock()
	go c.acceptLoop(ln, keepLive)
	return nil
}

// liveCheckTimeout is how long a session that is up has to answer its
// health check before a keepLive newcomer replaces it.
const liveCheckTimeout = 2 * time.Second

const streamCloseTimeout = 5 * time.Second

func yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.KeepAliveInterval = 10 * time.Second
	cfg.ConnectionWriteTimeout = 30 * time.Second
	// A larger window lets one stream move hundreds of MB/s over the socket.
	cfg.MaxStreamWindowSize = 4 << 20
	cfg.StreamOpenTimeout = 10 * time.Second
	// The agent never opens streams (guard cuts a connection that does);
	// the backlog also bounds the daemon's own unanswered opens.
	cfg.AcceptBacklog = 16
	// A stream the daemon closed is forgotten soon even if the agent never
	// closes its end: until then, what the agent sends into it is buffered.
	cfg.StreamCloseTimeout = streamCloseTimeout
	return cfg
}

// logf logs a line caused by the sandbox, rate-limited per sandbox.
func (c *Conn) logf(level slog.Level, msg string, args ...any) {
	sandboxLog.Log(context.Background(), c.log, c.id, level, msg, args...)
}

func (c *Conn) acceptLoop(ln net.Listener, keepLive bool) {
	defer c.accepting.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			c.logf(slog.LevelWarn, "accept agent connection", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		// One handshake at a time: a flood of connections costs a close
		// each, not a session and goroutines each.
		if !c.pending.CompareAndSwap(false, true) {
			c.refused.Add(1)
			nc.Close()
			c.logf(slog.LevelWarn, "agent connection refused: another one is in its handshake")
			continue
		}
		c.adopts.Add(1)
		go func() {
			defer c.adopts.Done()
			c.adopt(nc, keepLive, func() { c.pending.Store(false) })
		}()
	}
}

// adopt turns a new connection into the current session once the agent on
// it answers a health check, and calls handshakeDone when that is decided.
// The latest healthy connection wins: an agent that restarted replaces its
// dead predecessor (with keepLive, only a predecessor that does not answer
// its health check, or whose agent says it is leaving it). Only one
// session is live: the one replaced is closed, or drained when its agent
// left it.
func (c *Conn) adopt(nc net.Conn, keepLive bool, handshakeDone func()) {
	var leaving *yamux.Session
	if keepLive {
		var holds bool
		if holds, leaving = c.current(); holds {
			handshakeDone()
			nc.Close()
			c.refused.Add(1)
			c.logf(slog.LevelWarn, "agent connection refused: the sandbox's session is up and answers")
			return
		}
	}
	// Every read and write of the handshake has a deadline, so a peer
	// that trickles (or sends nothing) frees the slot in time.
	_ = nc.SetDeadline(time.Now().Add(c.handshakeTimeout))
	g := newGuard(nc)
	cfg := yamuxConfig()
	cfg.StreamCloseTimeout = c.closeTimeout
	sess, err := yamux.Client(g, cfg)
	if err != nil {
		handshakeDone()
		nc.Close()
		return
	}
	ctx, cancel := context.WithTimeout(c.adopting, c.handshakeTimeout)
	h, err := healthOn(ctx, sess)
	if hook := c.onConnect.Load(); err == nil && hook != nil {
		err = runHook(ctx, sess, *hook)
	}
	cancel()
	if err == nil {
		err = nc.SetDeadline(time.Time{})
	}
	handshakeDone()
	if err != nil {
		sess.Close()
		if c.adopting.Err() == nil {
			c.refused.Add(1)
			c.logf(slog.LevelWarn, "agent connection failed its health check", "err", err)
		}
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		sess.Close()
		return
	}
	old := c.sess
	c.sess, c.guard = sess, g
	c.health = h
	select {
	case <-c.readyCh:
	default:
		close(c.readyCh)
	}
	c.mu.Unlock()
	switch {
	case old == nil:
	case old == leaving:
		c.drain(old)
	default:
		old.Close()
	}
	c.transport.CloseIdleConnections()
	c.logf(slog.LevelDebug, "agent connected", "agentPid", h.PID, "version", h.Version)

	<-sess.CloseChan()
	c.mu.Lock()
	if c.sess == sess {
		c.sess, c.guard = nil, nil
		c.readyCh = make(chan struct{})
	}
	c.mu.Unlock()
	if err := g.cutErr(); err != nil {
		c.refused.Add(1)
		c.logf(slog.LevelWarn, "agent session cut", "err", err)
		return
	}
	c.logf(slog.LevelDebug, "agent session ended")
}

// current checks the session that is up when a keepLive newcomer comes.
// It holds when its agent answers a health check within liveCheckTimeout
// and does not say it is leaving; leaving is the session when its agent
// said it is (the newcomer is its successor: drain, not Close, when it
// is replaced). Only the session's own agent can say so, on the session:
// a newcomer proves nothing by coming.
func (c *Conn) current() (holds bool, leaving *yamux.Session) {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil || s.IsClosed() {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(c.adopting, liveCheckTimeout)
	defer cancel()
	h, err := healthOn(ctx, s)
	switch {
	case err != nil:
		return false, nil
	case h.Leaving:
		return false, s
	default:
		return true, nil
	}
}

// drain closes sess, a session its agent left for the one that replaced
// it, once the daemon has no stream open on it: the calls it carried (an
// exec, a terminal, a port tunnel) finish there while new ones take the
// new session. The streams a finished call leaves idle in the transport's
// pool are closed every drainIdle, so that none is taken for a new call
// and the session empties; the transport never hands out a stream it is
// closing, so no call is cut. One session drains at a time: another's
// drain closes it, which bounds what an agent that keeps leaving can hold.
func (c *Conn) drain(sess *yamux.Session) {
	c.mu.Lock()
	prev := c.draining
	c.draining = sess
	closed := c.closed
	c.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	if closed {
		sess.Close()
		return
	}
	c.logf(slog.LevelDebug, "agent left its session; draining it", "streams", sess.NumStreams())
	c.adopts.Add(1)
	go func() {
		defer c.adopts.Done()
		t := time.NewTicker(drainPoll)
		defer t.Stop()
		lastIdle := time.Now()
	wait:
		for sess.NumStreams() > 0 {
			select {
			case now := <-t.C:
				if now.Sub(lastIdle) >= drainIdle {
					c.transport.CloseIdleConnections()
					lastIdle = now
				}
			case <-sess.CloseChan():
				break wait
			case <-c.adopting.Done():
				break wait
			}
		}
		sess.Close()
		c.mu.Lock()
		if c.draining == sess {
			c.draining = nil
		}
		c.mu.Unlock()
	}()
}

// drainPoll is how often a draining session's streams are counted, and
// drainIdle how often the idle streams are closed meanwhile (the new
// session's too: a yamux stream costs a frame to open again).
const (
	drainPoll = 100 * time.Millisecond
	drainIdle = time.Second
)

// runHook runs hook with a transport on sess.
func runHook(ctx context.Context, sess *yamux.Session, hook ConnectHook) error {
	tr := &http.Transport{
		DialContext:            func(context.Context, string, string) (net.Conn, error) { return sess.Open() },
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	defer tr.CloseIdleConnections()
	if err := hook(ctx, tr); err != nil {
		return fmt.Errorf("connect hook: %w", err)
	}
	return nil
}

// healthOn asks the agent on sess for its health, on a stream of its own.
func healthOn(ctx context.Context, sess *yamux.Session) (wire.AgentHealth, error) {
	tr := &http.Transport{
		DialContext:            func(context.Context, string, string) (net.Conn, error) { return sess.Open() },
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/health", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return wire.AgentHealth{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return wire.AgentHealth{}, fmt.Errorf("health check answered HTTP %d", resp.StatusCode)
	}
	var h wire.AgentHealth
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxHealth)).Decode(&h); err != nil {
		return wire.AgentHealth{}, fmt.Errorf("decode health: %w", err)
	}
	return h, nil
}

// WaitReady blocks until an agent session is up or ctx ends.
func (c *Conn) WaitReady(ctx context.Context) error {
	_, err := c.session(ctx)
	return err
}

// Connected reports whether an agent session is up right now.
func (c *Conn) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil && !c.sess.IsClosed()
}

func (c *Conn) session(ctx context.Context) (*yamux.Session, error) {
	s, _, err := c.sessionGuard(ctx)
	return s, err
}

func (c *Conn) sessionGuard(ctx context.Context) (*yamux.Session, *guard, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, nil, fmt.Errorf("agent connection of sandbox %s is closed: %w", c.id, errdefs.ErrUnavailable)
		}
		s, g, ready := c.sess, c.guard, c.readyCh
		c.mu.Unlock()
		if s != nil && !s.IsClosed() {
			return s, g, nil
		}
		select {
		case <-ready:
		case <-c.adopting.Done():
			// Closed while waiting (the box died): the loop's check says so,
			// rather than a wait for a session that will never come.
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("wait for the agent of sandbox %s: %w", c.id, errors.Join(errdefs.ErrUnavailable, ctx.Err()))
		}
	}
}

func (c *Conn) openStream(ctx context.Context) (net.Conn, error) {
	s, g, err := c.sessionGuard(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open agent stream: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	return stream{Stream: st, g: g}, nil
}

// Do sends req to the agent. req.URL's path and query are used as they are;
// the host is ignored. A transport failure wraps errdefs.ErrUnavailable.
// A 2xx answer's body is the agent's stream as it comes; any other body is
// an error document, capped at maxErrorBody and read under the sandbox's
// decode budget.
func (c *Conn) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		resp.Body = c.errorBody(req.Context(), resp.Body)
	}
	return resp, nil
}

// Send is Do for callers that want only a 2xx answer: any other answer
// is read as Do reads it and returned as its *errdefs.RemoteError.
func (c *Conn) Send(req *http.Request) (*http.Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errdefs.Read(resp)
	}
	return resp, nil
}

// ReadError reads the error document of an answer that did not come
// through Do (a reverse proxy's, through Transport) as Do's are read: at
// most maxErrorBody, under the decode budget.
func (c *Conn) ReadError(resp *http.Response) *errdefs.RemoteError {
	ctx := context.Background()
	if resp.Request != nil {
		ctx = resp.Request.Context()
	}
	resp.Body = c.errorBody(ctx, resp.Body)
	return errdefs.Read(resp)
}

func (c *Conn) errorBody(ctx context.Context, rc io.ReadCloser) *errorBody {
	return &errorBody{ctx: ctx, c: c, rc: rc, r: io.LimitReader(rc, maxErrorBody)}
}

func (c *Conn) do(req *http.Request) (*http.Response, error) {
	req.URL.Scheme = "http"
	req.URL.Host = "agent"
	resp, err := c.client.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("agent request %s: %w", req.URL.Path, ctxErr)
		}
		if errors.Is(err, errdefs.ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("agent request %s: %w", req.URL.Path, errors.Join(errdefs.ErrUnavailable, err))
	}
	return resp, nil
}

// PutArchive unpacks the tar (or tar.gz) stream archive into the box's
// directory dir, made if missing (the agent's PUT /v1/archive). With
// anyLinks its symlinks may point anywhere, else only inside dir. A failed
// answer closes archive's side with the error, so its writer stops.
func (c *Conn) PutArchive(ctx context.Context, dir string, archive io.Reader, anyLinks bool) error {
	q := url.Values{"path": {dir}}
	if anyLinks {
		q.Set("links", "any")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/archive?"+q.Encode(), archive)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.Send(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// DoJSON sends a request with an optional JSON body and decodes a JSON answer
// into out (unless out is nil). Non-2xx answers become *errdefs.RemoteError.
func (c *Conn) DoJSON(ctx context.Context, method, pathAndQuery string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode agent request: %w", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+pathAndQuery, body)
	if err != nil {
		return fmt.Errorf("build agent request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errdefs.Read(resp)
	}
	if out == nil {
		// Read what is small, so the stream can carry the next request;
		// reading allocates nothing.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSON))
		return nil
	}
	release, err := c.reserve(ctx, maxJSON)
	if err != nil {
		return err
	}
	defer release()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSON)).Decode(out); err != nil {
		return fmt.Errorf("decode agent answer: %w", err)
	}
	return nil
}

// Processes lists the agent's processes, calling fn with each until it
// returns false. The list is decoded as it streams: one entry in memory at
// a time, at most maxProcesses of them in maxProcessList bytes.
func (c *Conn) Processes(ctx context.Context, fn func(wire.Process) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/processes", nil)
	if err != nil {
		return fmt.Errorf("build agent request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errdefs.Read(resp)
	}
	release, err := c.reserve(ctx, maxProcessList)
	if err != nil {
		return err
	}
	defer release()
	if err := decodeProcesses(io.LimitReader(resp.Body, maxProcessList), fn); err != nil {
		return fmt.Errorf("decode agent process list: %w", err)
	}
	return nil
}

// decodeProcesses walks {"processes":[...]} (other members are skipped).
func decodeProcesses(r io.Reader, fn func(wire.Process) bool) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		if key != "processes" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		if err := expectDelim(dec, '['); err != nil {
			return err
		}
		for n := 0; dec.More(); n++ {
			if n == maxProcesses {
				return fmt.Errorf("more than %d processes", maxProcesses)
			}
			var p wire.Process
			if err := dec.Decode(&p); err != nil {
				return err
			}
			if !fn(p) {
				return nil
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("got %v, want %v", tok, want)
	}
	return nil
}

// reserve takes n bytes of the sandbox's decode budget until release, so
// that its concurrent calls together hold at most decodeBudget.
func (c *Conn) reserve(ctx context.Context, n int64) (release func(), err error) {
	if err := c.budget.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("wait for the decode budget of sandbox %s: %w", c.id, errors.Join(errdefs.ErrUnavailable, err))
	}
	var once sync.Once
	return func() { once.Do(func() { c.budget.Release(n) }) }, nil
}

// errorBody is the body of an answer that is not 2xx: at most maxErrorBody
// bytes of it, read under the decode budget, which is taken at the first
// read and given back at Close.
type errorBody struct {
	ctx     context.Context // the request's; only for waiting on the budget
	c       *Conn
	rc      io.ReadCloser
	r       io.Reader
	release func()
	err     error
}

func (b *errorBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.release == nil {
		release, err := b.c.reserve(b.ctx, maxErrorBody)
		if err != nil {
			b.err = err
			return 0, err
		}
		b.release = release
	}
	return b.r.Read(p)
}

func (b *errorBody) Close() error {
	err := b.rc.Close()
	if b.release != nil {
		b.release()
	}
	return err
}

// Health returns what the agent said when it last connected.
func (c *Conn) Health() wire.AgentHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

// Close stops listening and ends the current session. The agent in the box is
// not touched: it keeps running and redials when a daemon listens again.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s, dr := c.sess, c.draining
	c.sess = nil
	c.mu.Unlock()
	if dr != nil {
		dr.Close()
	}
	c.lnMu.Lock()
	c.lnClosed = true
	var err error
	for _, ln := range c.lns {
		err = errors.Join(err, ln.Close())
	}
	c.lnMu.Unlock()
	c.accepting.Wait()
	c.stop()
	if s != nil {
		s.Close()
	}
	// Every adopt ends now: a health check is cancelled, and a session it
	// adopted was closed above (one that passed its check after that
	// finds c closed).
	c.adopts.Wait()
	c.transport.CloseIdleConnections()
	if n := sandboxLog.Forget(c.id); n > 0 {
		c.log.Warn("log lines about the agent connection were dropped", "droppedLines", n)
	}
	return err
}

// Refused returns how many connections were closed at once (another was in
// its handshake), failed their handshake, or were cut by the guard.
func (c *Conn) Refused() int64 { return c.refused.Load() }

// Transport returns the round tripper that carries requests to the agent,
// for reverse proxies (WebSocket upgrades included). Requests must use host
// "agent".
func (c *Conn) Transport() http.RoundTripper { return c.transport }
