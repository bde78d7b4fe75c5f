package agentconn

import (
	"encoding/binary"
	"errors"
	"net"
	"time"
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
type guard struct {
	net.Conn
	hdr  [frameHeader]byte
	have int    // header bytes seen of the frame being read
	skip uint32 // payload bytes of a data frame still to pass
	err  error

	pings    float64 // ping tokens left
	pingLast time.Time
}

func newGuard(nc net.Conn) *guard {
	return &guard{Conn: nc, pings: pingBurst, pingLast: time.Now()}
}

// Read is called by yamux's one receive goroutine only.
func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.Conn.Read(p)
	if ferr := g.scan(p[:n]); ferr != nil {
		g.err = ferr
		return 0, ferr
	}
	return n, err
}

func (g *guard) scan(b []byte) error {
	for len(b) > 0 {
		if g.skip > 0 {
			k := min(uint32(len(b)), g.skip)
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
			if typ == frameData {
				g.skip = binary.BigEndian.Uint32(g.hdr[8:12])
			}
		case framePing:
			if flags&flagSYN != 0 && !g.ping(time.Now()) {
				return errPingFlood
			}
		case frameGoAway:
			return errGoAway
		}
	}
	return nil
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
