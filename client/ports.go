package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Port shapes of the API.
type (
	PortWaitResult = wire.PortWaitResult
	PortAccess     = wire.PortAccess
	PreviewURL     = wire.PreviewURL
)

func portPath(id string, port int, rest string) string {
	return sandboxPath(id, "/ports/"+strconv.Itoa(port)+rest)
}

// WaitPort waits until something inside sandbox id accepts TCP connections
// on port (on 127.0.0.1 or ::1), or timeout passes (an error that matches
// ErrDeadlineExceeded). A zero timeout means the daemon's default, 30s.
func (c *Client) WaitPort(ctx context.Context, id string, port int, timeout time.Duration) (PortWaitResult, error) {
	var out PortWaitResult
	op := fmt.Sprintf("wait for port %d in sandbox %s", port, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeoutMs", strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: portPath(id, port, "/wait"), query: q}, nil, &out)
	return out, err
}

// SetPortPublic makes the HTTP preview of port reachable without a token
// (public) or only with one (the default).
func (c *Client) SetPortPublic(ctx context.Context, id string, port int, public bool) (PortAccess, error) {
	var out PortAccess
	op := fmt.Sprintf("set port %d of sandbox %s public=%t", port, id, public)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: portPath(id, port, "/public")}, wire.SetPortPublicRequest{Public: public}, &out)
	return out, err
}

// PreviewURL returns where the HTTP preview of port is reached, by host
// name and by path, and the sandbox's preview token.
func (c *Client) PreviewURL(ctx context.Context, id string, port int) (PreviewURL, error) {
	var out PreviewURL
	op := fmt.Sprintf("preview url of port %d in sandbox %s", port, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: portPath(id, port, "/preview-url")}, nil, &out)
	return out, err
}

// DialPort opens a TCP connection to port inside sandbox id, tunnelled over
// a WebSocket through the daemon and the sandbox's agent. The connection is
// made inside the sandbox; if nothing listens there, DialPort fails with an
// error that matches ErrNotFound.
//
// The result is a *PortConn: a net.Conn that also has CloseWrite. ctx bounds
// only the dial.
func (c *Client) DialPort(ctx context.Context, id string, port int) (*PortConn, error) {
	op := fmt.Sprintf("dial port %d in sandbox %s", port, id)
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, request{op: op, method: http.MethodGet, path: portPath(id, port, "/tcp")})
	if err != nil {
		return nil, err
	}
	u := *req.URL
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      c.hc,
		HTTPHeader:      req.Header,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("%s: %w", op, errdefs.Read(resp))
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	ws.SetReadLimit(-1) // binary messages are streamed, never held whole
	pc := &PortConn{ws: ws, port: port}
	pc.ctx, pc.cancel = context.WithCancel(context.Background())
	return pc, nil
}

// PortConn is a TCP connection to a port inside a sandbox. As with
// websocket.NetConn, a deadline that passes while a Read or Write waits
// closes the connection rather than only failing that call.
type PortConn struct {
	ws     *websocket.Conn
	port   int
	ctx    context.Context
	cancel context.CancelFunc

	readMu sync.Mutex
	cur    io.Reader // the binary message being read
	// curCancel ends the context cur reads under: the library reads a
	// message's later frames with the context given to Reader.
	curCancel context.CancelFunc
	eof       bool

	writeMu sync.Mutex

	dlMu          sync.Mutex
	readDeadline  time.Time
	writeDeadline time.Time

	closeOnce sync.Once
}

var _ net.Conn = (*PortConn)(nil)

func (pc *PortConn) opCtx(deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return pc.ctx, func() {}
	}
	return context.WithDeadline(pc.ctx, deadline)
}

// Read reads what the program in the sandbox sent. It returns io.EOF once
// the program closed its side (or the tunnel ended cleanly).
func (pc *PortConn) Read(p []byte) (int, error) {
	pc.readMu.Lock()
	defer pc.readMu.Unlock()
	for {
		if pc.eof {
			return 0, io.EOF
		}
		if pc.cur != nil {
			n, err := pc.cur.Read(p)
			if errors.Is(err, io.EOF) {
				pc.cur = nil
				pc.curCancel()
				err = nil
			}
			if n > 0 || err != nil {
				return n, pc.wrapErr("read", err)
			}
			continue
		}
		pc.dlMu.Lock()
		dl := pc.readDeadline
		pc.dlMu.Unlock()
		ctx, cancel := pc.opCtx(dl)
		typ, rd, err := pc.ws.Reader(ctx)
		if err != nil {
			cancel()
			var ce websocket.CloseError
			if errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure {
				pc.eof = true
				return 0, io.EOF
			}
			return 0, pc.wrapErr("read", err)
		}
		if typ == websocket.MessageBinary {
			pc.cur, pc.curCancel = rd, cancel
			continue
		}
		var ctl wire.TunnelControl
		err = json.NewDecoder(io.LimitReader(rd, 4<<10)).Decode(&ctl)
		if err == nil {
			_, err = io.Copy(io.Discard, rd) // finish the message under ctx
		}
		cancel()
		if err != nil {
			return 0, pc.wrapErr("read", fmt.Errorf("decode control message: %w", err))
		}
		if ctl.Type == wire.TunnelEOF {
			pc.eof = true
		}
		// Unknown control messages are skipped: newer daemons may add some.
	}
}

// Write sends p to the program in the sandbox.
func (pc *PortConn) Write(p []byte) (int, error) {
	pc.writeMu.Lock()
	defer pc.writeMu.Unlock()
	pc.dlMu.Lock()
	dl := pc.writeDeadline
	pc.dlMu.Unlock()
	ctx, cancel := pc.opCtx(dl)
	defer cancel()
	// Large writes go in pieces so that one call does not become one huge
	// message that the far side must take whole before relaying.
	const chunk = 256 << 10
	written := 0
	for written < len(p) {
		end := min(written+chunk, len(p))
		if err := pc.ws.Write(ctx, websocket.MessageBinary, p[written:end]); err != nil {
			return written, pc.wrapErr("write", err)
		}
		written = end
	}
	return written, nil
}

// CloseWrite half-closes the connection: the program in the sandbox reads
// EOF, and this side can still Read its answer.
func (pc *PortConn) CloseWrite() error {
	pc.writeMu.Lock()
	defer pc.writeMu.Unlock()
	msg, _ := json.Marshal(wire.TunnelControl{Type: wire.TunnelCloseWrite})
	ctx, cancel := context.WithTimeout(pc.ctx, 30*time.Second)
	defer cancel()
	return pc.wrapErr("close write", pc.ws.Write(ctx, websocket.MessageText, msg))
}

// Close ends the tunnel and the connection to the port.
func (pc *PortConn) Close() error {
	var err error
	pc.closeOnce.Do(func() {
		err = pc.ws.Close(websocket.StatusNormalClosure, "")
		pc.cancel()
		var ce websocket.CloseError
		if errors.As(err, &ce) || errors.Is(err, net.ErrClosed) {
			err = nil // the far side closed first; nothing was lost
		}
	})
	return err
}

func (pc *PortConn) wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("port %d tunnel: %s: %w", pc.port, op, err)
}

type tunnelAddr string

func (a tunnelAddr) Network() string { return "hotcell-tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

// LocalAddr names the tunnel; a tunnel has no local socket address.
func (pc *PortConn) LocalAddr() net.Addr { return tunnelAddr("client") }

// RemoteAddr is the port on the sandbox's loopback.
func (pc *PortConn) RemoteAddr() net.Addr {
	return tunnelAddr(net.JoinHostPort("localhost", strconv.Itoa(pc.port)))
}

// SetDeadline sets both deadlines.
func (pc *PortConn) SetDeadline(t time.Time) error {
	pc.dlMu.Lock()
	pc.readDeadline, pc.writeDeadline = t, t
	pc.dlMu.Unlock()
	return nil
}

// SetReadDeadline bounds later Reads (see PortConn about what expiry does).
func (pc *PortConn) SetReadDeadline(t time.Time) error {
	pc.dlMu.Lock()
	pc.readDeadline = t
	pc.dlMu.Unlock()
	return nil
}

// SetWriteDeadline bounds later Writes.
func (pc *PortConn) SetWriteDeadline(t time.Time) error {
	pc.dlMu.Lock()
	pc.writeDeadline = t
	pc.dlMu.Unlock()
	return nil
}
