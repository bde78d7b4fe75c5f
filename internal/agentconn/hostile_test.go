package agentconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn/agentconntest"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// hostileAgent connects a healthy agent that serves mux and returns its
// session's end; written counts the bytes its endless answers got out.
func hostileAgent(t *testing.T, c *Conn, mux *http.ServeMux) *fakeAgent {
	t.Helper()
	daemonEnd, agentEnd := net.Pipe()
	a := &fakeAgent{sess: agentconntest.Serve(t, agentEnd, agentconntest.Healthy(wire.AgentHealth{Version: "hostile", PID: 7}, mux))}
	adopted := make(chan struct{})
	go func() {
		defer close(adopted)
		c.adopt(daemonEnd, false, func() {})
	}()
	t.Cleanup(func() {
		a.sess.Close() // adopt returns when the session ends
		<-adopted
	})
	waitHealth(t, c, 7)
	return a
}

// endless writes chunk until the reader goes away, counting in n.
func endless(n *atomic.Int64, prefix string) http.HandlerFunc {
	chunk := []byte(strings.Repeat("x", 32<<10))
	return func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, prefix)
		for {
			k, err := w.Write(chunk)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}
}

// TestCappedAnswers: every answer the daemon decodes is read only up to its
// cap, so an agent answering with a never-ending body gets an error back
// after little of it was read (the rest of what it sent is what the
// stream's window and buffers hold), not a daemon that reads on.
func TestCappedAnswers(t *testing.T) {
	t.Parallel()
	// What the agent got out beyond a cap: the yamux window (4 MiB) and
	// the transport's buffers. Without a cap it would be unbounded.
	const slack = 8 << 20
	tests := []struct {
		name  string
		serve func(n *atomic.Int64) http.HandlerFunc
		call  func(ctx context.Context, c *Conn) error
		want  string
	}{{
		name:  "small document",
		serve: func(n *atomic.Int64) http.HandlerFunc { return endless(n, `{"path":"`) },
		call: func(ctx context.Context, c *Conn) error {
			var u wire.DiskUsage
			return c.DoJSON(ctx, http.MethodGet, "/v1/stats/disk", nil, &u)
		},
		want: "decode agent answer",
	}, {
		name:  "process list entry",
		serve: func(n *atomic.Int64) http.HandlerFunc { return endless(n, `{"processes":[{"command":"`) },
		call: func(ctx context.Context, c *Conn) error {
			return c.Processes(ctx, func(wire.Process) bool { return true })
		},
		want: "decode agent process list",
	}, {
		name: "process list entries",
		serve: func(n *atomic.Int64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"processes":[{"id":"0"}`)
				for i := 1; ; i++ {
					k, err := fmt.Fprintf(w, `,{"id":"%d"}`, i)
					n.Add(int64(k))
					if err != nil {
						return
					}
				}
			}
		},
		call: func(ctx context.Context, c *Conn) error {
			return c.Processes(ctx, func(wire.Process) bool { return true })
		},
		want: fmt.Sprintf("more than %d processes", maxProcesses),
	}, {
		name: "error document",
		serve: func(n *atomic.Int64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusTeapot)
				endless(n, `{"error":{"code":"x","message":"`)(w, r)
			}
		},
		call: func(ctx context.Context, c *Conn) error {
			var u wire.DiskUsage
			err := c.DoJSON(ctx, http.MethodGet, "/v1/stats/disk", nil, &u)
			var re *errdefs.RemoteError
			if !errors.As(err, &re) || len(re.Message) > maxErrorBody+100 {
				return fmt.Errorf("got %T %.200v, want a RemoteError of at most %d bytes", err, err, maxErrorBody)
			}
			return errors.New("remote error")
		},
		want: "remote error",
	}, {
		name: "error document through the transport",
		serve: func(n *atomic.Int64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
				endless(n, `{"error":{"code":"x","message":"`)(w, r)
			}
		},
		call: func(ctx context.Context, c *Conn) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/pty", nil)
			resp, err := c.Transport().RoundTrip(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if re := c.ReadError(resp); len(re.Message) > maxErrorBody+100 {
				return fmt.Errorf("got a message of %d bytes, want at most %d", len(re.Message), maxErrorBody)
			}
			return errors.New("remote error")
		},
		want: "remote error",
	}, {
		name: "headers",
		serve: func(n *atomic.Int64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				c, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				buf.WriteString("HTTP/1.1 200 OK\r\n")
				for i := 0; ; i++ {
					k, err := fmt.Fprintf(buf, "X-H%d: %s\r\n", i, strings.Repeat("h", 1000))
					n.Add(int64(k))
					if err != nil {
						return
					}
				}
			}
		},
		call: func(ctx context.Context, c *Conn) error {
			var u wire.DiskUsage
			return c.DoJSON(ctx, http.MethodGet, "/v1/stats/disk", nil, &u)
		},
		want: "header",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newConn(t)
			var n atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("/", tt.serve(&n))
			hostileAgent(t, c, mux)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := tt.call(ctx, c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %.300v, want an error with %q", err, tt.want)
			}
			if got := n.Load(); got > slack {
				t.Errorf("the agent got %d bytes out, want at most %d: the daemon read past the cap", got, slack)
			}
		})
	}
}

// TestProcessesStreamed: the process list is decoded one entry at a time,
// and the caller can stop early.
func TestProcessesStreamed(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"other":[1,2,{"x":"y"}],"processes":[{"id":"a","state":"running"},{"id":"b","keepAlive":true,"state":"running"},{"id":"c"}]}`)
	})
	hostileAgent(t, c, mux)
	var got []string
	if err := c.Processes(t.Context(), func(p wire.Process) bool { got = append(got, p.ID); return true }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Errorf("got %v, want [a b c]", got)
	}
	got = nil
	if err := c.Processes(t.Context(), func(p wire.Process) bool { got = append(got, p.ID); return !p.KeepAlive }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("stopping at b: got %v, want [a b]", got)
	}
}

// TestDecodeBudget: one sandbox's decodes share a budget; a call that
// cannot get its share waits, up to its context, instead of allocating.
func TestDecodeBudget(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"bytes":1}`) })
	hostileAgent(t, c, mux)
	release, err := c.reserve(t.Context(), decodeBudget-maxJSON+1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	var u wire.DiskUsage
	if err := c.DoJSON(ctx, http.MethodGet, "/v1/stats/disk", nil, &u); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "decode budget") {
		t.Errorf("with the budget taken: got %v, want a decode budget error", err)
	}
	release()
	if err := c.DoJSON(t.Context(), http.MethodGet, "/v1/stats/disk", nil, &u); err != nil || u.Bytes != 1 {
		t.Errorf("with the budget back: got %+v %v, want bytes 1", u, err)
	}
}

// listenShort is newConn with a short handshake timeout, listening on a
// real socket that the test dials.
func listenShort(t *testing.T, timeout time.Duration) (*Conn, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "hc-ac-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "a.sock")
	c, err := listen("sb-"+t.Name(), path, slog.New(slog.DiscardHandler), timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

// TestOneHandshake: while one connection is in its handshake, others are
// closed at once; a connection that says nothing is dropped when its
// handshake times out, and the agent that comes next is adopted. Nothing
// is left running for the refused ones.
func TestOneHandshake(t *testing.T) {
	c, path := listenShort(t, 500*time.Millisecond)
	before := runtime.NumGoroutine()

	slow, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	for deadline := time.Now().Add(5 * time.Second); !c.pending.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first connection never started its handshake")
		}
	}
	const flood = 200
	for i := range flood {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d while one is in its handshake: got %v, want it closed at once (EOF)", i, err)
		}
		nc.Close()
	}
	if got := c.Refused(); got < flood {
		t.Errorf("refused: got %d, want at least %d", got, flood)
	}
	// The slow one is cut when its handshake times out.
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, slow); err != nil {
		t.Errorf("the silent connection: got %v, want it closed", err)
	}
	// Its handshake ends just after (a connection that came before that
	// would be closed at once; the real agent redials, this test does not).
	for deadline := time.Now().Add(5 * time.Second); c.pending.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the silent connection's handshake never ended")
		}
	}

	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	newFakeAgent(t, nc, "real", 42, true)
	waitHealth(t, c, 42)
	if got := who(t, c); got != "real" {
		t.Errorf("got %q, want real", got)
	}
	// A few goroutines serve the session (yamux's, the transport's); the
	// refused connections left none.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before+20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: got %d, want about %d", runtime.NumGoroutine(), before)
		}
	}
}

// TestAgentCannotOpenStreams: a session whose agent opens a stream (or
// floods pings, or says go away) is cut, and the next agent is adopted.
func TestAgentCannotOpenStreams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		do   func(a *fakeAgent)
	}{
		{"open stream", func(a *fakeAgent) { a.sess.OpenStream() }},
		{"ping flood", func(a *fakeAgent) {
			for range 5 * pingBurst {
				go a.sess.Ping()
			}
		}},
		{"go away", func(a *fakeAgent) { a.sess.GoAway() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newConn(t)
			a, _ := connect(t, c, "hostile", 1, true)
			waitHealth(t, c, 1)
			tt.do(a)
			if !a.closed(t) {
				t.Fatal("the session was not cut")
			}
			connect(t, c, "real", 2, true)
			waitHealth(t, c, 2)
			if got := who(t, c); got != "real" {
				t.Errorf("got %q, want real", got)
			}
		})
	}
}

// TestGuardFrames: the guard follows frames however the bytes are split,
// and data that looks like a header inside a payload is payload.
func TestGuardFrames(t *testing.T) {
	t.Parallel()
	frame := func(typ byte, flags uint16, id, length uint32, payload ...byte) []byte {
		b := make([]byte, frameHeader, frameHeader+len(payload))
		b[1] = typ
		binary.BigEndian.PutUint16(b[2:], flags)
		binary.BigEndian.PutUint32(b[4:], id)
		binary.BigEndian.PutUint32(b[8:], length)
		return append(b, payload...)
	}
	syn := frame(frameWindowUpdate, flagSYN, 2, 0)
	var ok []byte
	ok = append(ok, frame(frameWindowUpdate, 2, 1, 1000)...) // ACK
	ok = append(ok, frame(frameData, 0, 1, uint32(len(syn)), syn...)...)
	ok = append(ok, frame(framePing, 2, 0, 7)...) // a ping answer
	ok = append(ok, frame(frameData, 4, 1, 0)...) // FIN
	for _, split := range []int{1, 5, 12, 13, len(ok)} {
		g := newGuard(nil)
		for b := ok; len(b) > 0; {
			k := min(split, len(b))
			if err := g.scan(b[:k]); err != nil {
				t.Fatalf("split %d: got %v on well-formed frames", split, err)
			}
			b = b[k:]
		}
		if err := g.scan(syn); !errors.Is(err, errAgentStream) {
			t.Errorf("split %d: a SYN from the agent: got %v, want %v", split, err, errAgentStream)
		}
	}
	// A closed stream's data is dropped: the frame passes, empty, with
	// its flags; other streams' data passes.
	g := newGuard(nil)
	g.closeStream(3)
	in := append(frame(frameData, 0, 3, 5, 'h', 'e', 'l', 'l', 'o'), frame(frameData, 0, 5, 2, 'o', 'k')...)
	in = append(in, frame(frameData, flagFIN, 3, 3, 'b', 'y', 'e')...)
	for i := range in {
		if err := g.scan(in[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	want := append(frame(frameData, 0, 3, 0), frame(frameData, 0, 5, 2, 'o', 'k')...)
	want = append(want, frame(frameData, flagFIN, 3, 0)...)
	if string(g.out) != string(want) {
		t.Errorf("closed stream 3: got % x, want % x", g.out, want)
	}
	if got := g.dropped.Load(); got != 8 {
		t.Errorf("dropped: got %d bytes, want 8", got)
	}
	if g.isClosed(3, 0) {
		t.Error("stream 3 is still marked closed after the agent's FIN")
	}

	g = newGuard(nil)
	now := time.Now()
	for i := range pingBurst {
		if !g.ping(now) {
			t.Fatalf("ping %d of the burst refused", i)
		}
	}
	if g.ping(now) {
		t.Error("a ping past the burst let through")
	}
	if !g.ping(now.Add(pingEvery)) {
		t.Error("a ping after the refill refused")
	}
}

// TestClosedStreamDropped: what an agent sends into a stream the daemon
// closed (a call given up after its cap) is dropped as it comes, not
// buffered in the stream until the agent closes its end.
func TestClosedStreamDropped(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/", endless(&n, `{"path":"`))
	hostileAgent(t, c, mux)
	var u wire.DiskUsage
	if err := c.DoJSON(t.Context(), http.MethodGet, "/v1/stats/disk", nil, &u); err == nil {
		t.Fatal("an endless answer decoded")
	}
	c.mu.Lock()
	g := c.guard
	c.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); g.dropped.Load() < 1<<20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %d bytes of the closed stream (the agent sent %d), want the rest of its window (over 1 MiB)", g.dropped.Load(), n.Load())
		}
	}
}

// TestCancelEndsBodyRead: when a call's context ends while its answer's
// body is being read, the read returns at once, even though the agent
// sends nothing more and never closes its end. yamux's own close is a
// half-close that leaves such a read waiting for the stream's close
// timeout (an hour here, past the test's limit): with a hostile agent
// that stalls its answers, every call a client gave up on would hold its
// API handler, buffers and stream that long (TestHostileAgent saw the
// daemon's memory double that way).
func TestCancelEndsBodyRead(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	c.closeTimeout = time.Hour
	stall := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/stall", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		<-stall // ignores the daemon's close, as a hostile agent would
	})
	hostileAgent(t, c, mux)
	t.Cleanup(func() { close(stall) }) // before the agent's session closes

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/stall", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("first"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
		t.Fatalf("the answer's first bytes: %q %v", first, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 64))
		read <- err
	}()
	cancel()
	select {
	case err := <-read:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the read of a cancelled call's body: got %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the read of a cancelled call's body still waits a minute after the cancel: it waits for the agent")
	}
}
