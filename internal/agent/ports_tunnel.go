package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/internal/wire"
)

// The agent reads the port into a buffer that starts at tunnelChunkMin and
// doubles, up to tunnelChunk, each time a read fills it: an idle or
// interactive tunnel holds only a small buffer, and a bulk transfer soon
// sends 1 MiB messages. Each message costs a fixed amount on every hop
// (WebSocket frame, yamux frames and their wakeups, the daemon's and the
// client's reads), which at 128 KiB messages was most of the CPU: BenchmarkTunnel
// went from ~370 to ~750 MiB/s with 1 MiB. A 1 MiB yamux frame holds the
// agent channel for well under a millisecond, so other streams still
// interleave.
const (
	tunnelChunkMin = 64 << 10
	tunnelChunk    = 1 << 20
)

// maxControlMessage bounds a text (control) message from the client.
const maxControlMessage = 4 << 10

// tunnel relays a WebSocket to a TCP connection to the port. The dial comes
// first, so a port nobody listens on is an HTTP error, not an upgraded
// connection that closes at once.
func (p *portService) tunnel(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	nc, err := dialPort(dctx, port)
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The daemon authenticated the caller; browsers never reach the
		// agent directly, so there is no origin to check here.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		return nil // Accept wrote the HTTP error
	}
	defer ws.CloseNow()
	if err := relayTunnel(r.Context(), ws, nc.(*net.TCPConn), p.keepalive); err != nil {
		p.log.Debug("tunnel failed", "port", port, "err", err)
	}
	return nil
}

type tunnelEvent int

const (
	clientClosedWrite tunnelEvent = iota // the client sent close_write
	portClosedWrite                      // the program's side reached EOF
)

// relayTunnel copies both ways until both sides have closed their write
// half or the client closes the WebSocket (nil), or anything fails (an
// error, also sent to the client in the close frame). It closes the
// WebSocket and returns only when both copying goroutines have stopped.
func relayTunnel(ctx context.Context, ws *websocket.Conn, tc *net.TCPConn, keepalive time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	events := make(chan tunnelEvent, 2)
	errc := make(chan error, 2)
	done := make(chan struct{}, 2)
	defer func() {
		cancel()
		// Unblock both copies: the TCP read by closing the socket, the
		// WebSocket read by the cancelled context.
		tc.Close()
		<-done
		<-done
	}()
	ws.SetReadLimit(-1) // messages are streamed, never held whole

	go func() { // port → client
		defer func() { done <- struct{}{} }()
		buf := make([]byte, tunnelChunkMin)
		for {
			n, err := tc.Read(buf)
			if n > 0 {
				if werr := ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					errc <- fmt.Errorf("write to client: %w", werr)
					return
				}
				if n == len(buf) && len(buf) < tunnelChunk {
					buf = make([]byte, 2*len(buf))
				}
			}
			if errors.Is(err, io.EOF) {
				msg, _ := json.Marshal(wire.TunnelControl{Type: wire.TunnelEOF})
				if werr := ws.Write(ctx, websocket.MessageText, msg); werr != nil {
					errc <- fmt.Errorf("write eof to client: %w", werr)
					return
				}
				events <- portClosedWrite
				return
			}
			if err != nil {
				errc <- fmt.Errorf("read from port: %w", err)
				return
			}
		}
	}()

	go func() { // client → port
		defer func() { done <- struct{}{} }()
		closedWrite := false
		for {
			// This loop keeps reading after close_write: the library
			// answers pings and close frames only while someone reads.
			typ, rd, err := ws.Reader(ctx)
			if err != nil {
				errc <- fmt.Errorf("read from client: %w", err)
				return
			}
			if typ == websocket.MessageBinary {
				if closedWrite {
					errc <- errors.New("client sent data after close_write")
					return
				}
				if _, err := io.Copy(tc, rd); err != nil {
					errc <- fmt.Errorf("write to port: %w", err)
					return
				}
				continue
			}
			var ctl wire.TunnelControl
			if err := json.NewDecoder(io.LimitReader(rd, maxControlMessage)).Decode(&ctl); err != nil {
				errc <- fmt.Errorf("decode control message: %w", err)
				return
			}
			switch ctl.Type {
			case wire.TunnelCloseWrite:
				if !closedWrite {
					closedWrite = true
					if err := tc.CloseWrite(); err != nil {
						errc <- fmt.Errorf("close write to port: %w", err)
						return
					}
					events <- clientClosedWrite
				}
			default:
				errc <- fmt.Errorf("unknown control message %q", clip(ctl.Type, 40))
				return
			}
		}
	}()

	// Pings keep idle tunnels alive through proxies. A missing pong is
	// not fatal: a client that is not reading (backpressure) cannot answer;
	// dead peers are found by TCP keepalives on the connections underneath.
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	var clientDone, portDone bool
	for {
		select {
		case ev := <-events:
			switch ev {
			case clientClosedWrite:
				clientDone = true
			case portClosedWrite:
				portDone = true
			}
			if clientDone && portDone {
				// Close before cancelling: a cancelled read would drop the
				// connection instead of finishing the close handshake.
				ws.Close(websocket.StatusNormalClosure, "")
				return nil
			}
		case err := <-errc:
			var ce websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == websocket.StatusNormalClosure || ce.Code == websocket.StatusGoingAway) {
				return nil // the client ended the tunnel
			}
			ws.Close(websocket.StatusInternalError, clip(err.Error(), 100))
			return err
		case <-tick.C:
			go func() {
				pctx, pcancel := context.WithTimeout(ctx, keepalive)
				defer pcancel()
				_ = ws.Ping(pctx)
			}()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
