package agentconn

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// yamux's frame header (github.com/hashicorp/yamux const.go): version,
// type, flags, stream id, length; a data frame's payload follows it.
const (
	frameHeader = 12

	frameData         = 0
	frameWindowUpdate = 1
	framePing         = 2
	frameGoAway       = 3

	flagSYN = 1
	flagFIN = 4
	flagRST = 8
)

// Pings from the agent: yamux answers each on a goroutine of its own that
// waits up to ConnectionWriteTimeout to send, so a flood of them is a flood
// of goroutines. The real agent pings every 15 s.
const (
	pingBurst = 10
	pingEvery = time.Second
)

var (
	errAgentStream = errors.New("the agent opened a stream: refused")
	errPingFlood   = errors.New("the agent sent pings faster than keepalives: refused")
	errGoAway      = errors.New("the agent said go away")
)

// guard sits between the agent's connection and the daemon's yamux session
// and reads the frame headers as they pass. Whatever comes out of a sandbox
// is untrusted, and yamux trusts its peer: a stream the agent opens waits in
// the accept backlog with its receive window of data, and every ping gets a
// goroutine. The agent is a server and never opens a stream or floods pings,
// so a connection that does is cut (the session ends with the read error).
// A go-away ends the session too instead of leaving one nothing can use.
//
// yamux also keeps receiving into a stream the daemon closed (its close is
// a half-close) until the agent closes its end, up to the stream's window
// (4 MiB): an agent that answers endlessly would have that buffered for
// every call the daemon gave up on. So the data of a stream the daemon
// closed is dropped here (the frame passes with no payload, its flags
// intact).
type guard struct {
	net.Conn
	buf  []byte // what was read from the connection
	obuf []byte // out's storage
	out  []byte // what passed and yamux has not read yet
	rerr error  // the connection's read error, after out
	hdr  [frameHeader]byte
	have int    // header bytes seen of the frame being read
	skip uint32 // payload bytes of a data frame still to pass (or drop)
	drop bool   // whether the payload being skipped is dropped
	err  error  // what Read returns once out is empty

	pings    float64 // ping tokens left
	pingLast time.Time

	mu      sync.Mutex
	closed  map[uint32]time.Time  // streams the daemon closed, when
	dropped atomic.Int64          // payload bytes dropped
	cut     atomic.Pointer[error] // why the guard cut the session, if it did
}

// maxClosed bounds the set of closed streams: past it, entries older than
// the yamux StreamCloseTimeout are pruned (yamux has reset them by then).
const maxClosed = 1024

func newGuard(nc net.Conn) *guard {
	const size = 32 << 10
	// A header held back from one read comes out with the next: out may
	// have up to a header more than was read.
	return &guard{Conn: nc, buf: make([]byte, size), obuf: make([]byte, 0, size+frameHeader), pings: pingBurst, pingLast: time.Now(), closed: map[uint32]time.Time{}}
}

// Read is called by yamux's one receive goroutine only.
func (g *guard) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		if g.rerr != nil {
			g.err = g.rerr
			continue
		}
		n, err := g.Conn.Read(g.buf)
		g.rerr = err
		if ferr := g.scan(g.buf[:n]); ferr != nil {
			g.err, g.out = ferr, nil
			g.cut.Store(&ferr)
		}
	}
	k := copy(p, g.out)
	g.out = g.out[k:]
	return k, nil
}

// cutErr says why the guard cut the session; nil if it did not.
func (g *guard) cutErr() error {
	if err := g.cut.Load(); err != nil {
		return *err
	}
	return nil
}

// closeStream marks a stream the daemon closed: its data is dropped.
func (g *guard) closeStream(id uint32) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.closed) >= maxClosed {
		for k, t := range g.closed {
			if now.Sub(t) > 2*streamCloseTimeout {
				delete(g.closed, k)
			}
		}
	}
	g.closed[id] = now
}

func (g *guard) isClosed(id uint32, flags uint16) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.closed[id]
	if ok && flags&(flagFIN|flagRST) != 0 {
		delete(g.closed, id) // the agent's end is closed too
	}
	return ok
}

// scan passes b's bytes to out, frame by frame, or fails.
func (g *guard) scan(b []byte) error {
	if len(g.out) == 0 {
		g.out = g.obuf[:0]
	}
	for len(b) > 0 {
		if g.skip > 0 {
			k := min(uint32(len(b)), g.skip)
			if g.drop {
				g.dropped.Add(int64(k))
			} else {
				g.out = append(g.out, b[:k]...)
			}
			b, g.skip = b[k:], g.skip-k
			continue
		}
		k := copy(g.hdr[g.have:], b)
		b, g.have = b[k:], g.have+k
		if g.have < frameHeader {
			return nil
		}
		g.have = 0
		typ, flags := g.hdr[1], binary.BigEndian.Uint16(g.hdr[2:4])
		switch typ {
		case frameData, frameWindowUpdate:
			if flags&flagSYN != 0 {
				return errAgentStream
			}
			id := binary.BigEndian.Uint32(g.hdr[4:8])
			closed := g.isClosed(id, flags)
			if typ == frameData {
				g.skip = binary.BigEndian.Uint32(g.hdr[8:12])
				g.drop = closed
				if closed {
					binary.BigEndian.PutUint32(g.hdr[8:12], 0)
				}
			}
		case framePing:
			if flags&flagSYN != 0 && !g.ping(time.Now()) {
				return errPingFlood
			}
		case frameGoAway:
			return errGoAway
		}
		g.out = append(g.out, g.hdr[:]...)
	}
	return nil
}

// stream is a stream the daemon opened. Closing it marks it in the guard
// and ends its reads: yamux's Close only half-closes, and a Read blocked
// on the stream (the transport reads a body on the caller's goroutine
// while a cancel closes the connection) would wait for data the guard now
// drops, or a FIN the agent may never send, until StreamCloseTimeout. A
// hostile agent that stalls its answers would have every call a client
// gave up on hold its handler, buffers and stream that long.
type stream struct {
	*yamux.Stream
	g *guard
}

func (s stream) Close() error {
	s.g.closeStream(s.StreamID())
	// A deadline in the past fails blocked and later reads at once.
	_ = s.Stream.SetReadDeadline(time.Unix(1, 0))
	return s.Stream.Close()
}

// ping takes a token from a bucket of pingBurst refilled once per pingEvery.
func (g *guard) ping(now time.Time) bool {
	g.pings = min(pingBurst, g.pings+float64(now.Sub(g.pingLast))/float64(pingEvery))
	g.pingLast = now
	if g.pings < 1 {
		return false
	}
	g.pings--
	return true
}
