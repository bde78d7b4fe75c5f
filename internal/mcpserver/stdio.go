package mcpserver

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport serves MCP over r and w (stdin and stdout) and answers
// every request it has read before it reports the end of r. A client may
// write its requests and close its end at once (`printf ... | hotcell
// mcp`): the SDK treats end of input as a broken connection and drops the
// requests still queued, so the end is held back until they are answered.
func StdioTransport(r io.Reader, w io.Writer) mcp.Transport {
	return &drainTransport{io: &mcp.IOTransport{Reader: io.NopCloser(r), Writer: nopWriteCloser{w}}}
}

// nopWriteCloser leaves closing stdout to the process's end.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type drainTransport struct{ io *mcp.IOTransport }

func (t *drainTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.io.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &drainConn{Connection: c, pending: map[jsonrpc.ID]bool{}, changed: make(chan struct{}), closed: make(chan struct{})}, nil
}

// drainConn counts the calls read and the responses written, and holds a
// read's io.EOF back until every call read has its response.
type drainConn struct {
	mcp.Connection

	mu      sync.Mutex
	pending map[jsonrpc.ID]bool
	changed chan struct{} // closed and replaced whenever pending shrinks
	closed  chan struct{}
	once    sync.Once
}

func (c *drainConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		if errors.Is(err, io.EOF) {
			c.drain(ctx)
		}
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.mu.Lock()
		c.pending[req.ID] = true
		c.mu.Unlock()
	}
	return msg, nil
}

func (c *drainConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.pending[resp.ID] {
			delete(c.pending, resp.ID)
			close(c.changed)
			c.changed = make(chan struct{})
		}
		c.mu.Unlock()
	}
	return err
}

// drain waits until no call is pending, the connection is closed or ctx
// ends.
func (c *drainConn) drain(ctx context.Context) {
	for {
		c.mu.Lock()
		n, changed := len(c.pending), c.changed
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-changed:
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *drainConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Connection.Close()
}
