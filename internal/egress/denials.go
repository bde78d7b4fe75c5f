package egress

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/wire"
)

// coalesceWindow folds repeated packets to one destination (a TCP SYN and
// its retransmissions, a UDP retry) into one denial entry.
const coalesceWindow = 10 * time.Second

// readDenials reads the NFLOG group until its socket is closed and turns
// each logged packet into a denial of the sandbox named by its prefix.
func (c *Controller) readDenials() {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.nfl.read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.ENOBUFS) {
				// The kernel dropped messages the socket had no room
				// for; the rules' counters still have them.
				c.log.Debug("egress denial log overflowed; some denials not itemised")
				continue
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			c.log.Warn("read egress denial log; it stops", "err", err)
			return
		}
		for _, p := range parseNflog(buf[:n]) {
			c.recordDenial(time.Now(), p)
		}
	}
}

// recordDenial adds one logged packet to its sandbox's denial log.
func (c *Controller) recordDenial(now time.Time, p nflogPacket) {
	key, reason, ok := parseNflogPrefix(p.Prefix)
	if !ok {
		return
	}
	c.mu.Lock()
	st, ok := c.byKey[key]
	if !ok {
		c.mu.Unlock()
		return
	}
	st.logged++
	d := wire.EgressDenial{
		Time: now.UTC(), Kind: wire.DenialConnect, Packets: 1,
		Address: p.Dst.String(), Protocol: protoName(p.Proto), Port: int(p.Port), Reason: reason,
	}
	if n := len(st.denied); n > 0 {
		last := &st.denied[n-1]
		if last.Kind == d.Kind && last.Address == d.Address && last.Protocol == d.Protocol &&
			last.Port == d.Port && last.Reason == d.Reason && d.Time.Sub(last.Time) < coalesceWindow {
			last.Packets++
			c.mu.Unlock()
			return
		}
	}
	st.addDenial(d)
	id := st.id
	c.mu.Unlock()
	if c.debugLog.allow(now) {
		// Only the parsed address, protocol and port go into the line:
		// the packet's other bytes are the sandbox's.
		c.log.Debug("egress connection denied", "sandbox", id, "destination", d.Address,
			"protocol", d.Protocol, "port", d.Port, "reason", reason)
	}
}

// logLimiter lets through at most logBurst lines a second, so that a
// sandbox flooding denials cannot flood the daemon's log.
type logLimiter struct {
	mu     sync.Mutex
	window time.Time
	n      int
}

const logBurst = 10

func (l *logLimiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	l.n++
	return l.n <= logBurst
}

// lineLimiter bounds the log lines one sandbox causes: at most
// sandboxLogLines a minute, and the first line after a held-back stretch
// says how many were held back. A flood of refused queries or failing
// lookups costs the log a few lines a minute, not one per packet.
type lineLimiter struct {
	mu     sync.Mutex
	window time.Time
	n      int
	held   int
}

const sandboxLogLines = 20

func (l *lineLimiter) allow(now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Minute {
		l.window, l.n = now, 0
	}
	if l.n >= sandboxLogLines {
		l.held++
		return false, 0
	}
	l.n++
	held, l.held = l.held, 0
	return true, held
}

// tokenBucket allows rate events a second on average, burst at once.
type tokenBucket struct {
	tokens float64
	last   time.Time
}

func (b *tokenBucket) allow(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
