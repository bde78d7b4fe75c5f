package egress

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The denial log: an NFLOG rule in front of each DROP of a sandbox's chains
// copies the first bytes of a dropped packet to an nfnetlink_log group, and
// the daemon reads that group over a NETLINK_NETFILTER socket. The packet
// bytes were written by sandbox code: the parser trusts no length in them.
//
// nfnetlink_log's constants (linux/netfilter/nfnetlink_log.h); x/sys/unix
// does not carry them.
const (
	nfulnlMsgPacket = 0
	nfulnlMsgConfig = 1

	nfulaCfgCmd     = 1
	nfulaCfgMode    = 2
	nfulaCfgQthresh = 5

	nfulnlCfgCmdBind     = 1
	nfulnlCfgCmdPfBind   = 3
	nfulnlCfgCmdPfUnbind = 4

	nfulnlCopyPacket = 2

	nfulaPayload = 9
	nfulaPrefix  = 10

	nlaTypeMask    = 0x3fff
	sizeofNfgenmsg = 4 // family, version, res_id (the group, big-endian) // without NLA_F_NESTED and NLA_F_NET_BYTEORDER

	// nflogCopy is how much of each packet the kernel copies: an IPv4
	// header with options (at most 60 bytes) plus the ports.
	nflogCopy = 64
	// nflogPrefixMagic starts the prefix of every hotcell NFLOG rule.
	nflogPrefixMagic = "hc"
)

// nflogPacket is what the denial log keeps of one logged packet.
type nflogPacket struct {
	Prefix string
	Src    netip.Addr
	Dst    netip.Addr
	Proto  uint8
	// Port is the destination port of TCP and UDP (first fragments only).
	Port uint16
}

// maxNflogPackets bounds what one receive buffer can turn into: a 64 KiB
// buffer holds a few hundred messages at most anyway.
const maxNflogPackets = 1024

// parseNflog parses the netlink messages in b (one receive) and returns
// the IPv4 packets of NFULNL_MSG_PACKET messages. Malformed input ends the
// parse; it never reads outside b.
func parseNflog(b []byte) []nflogPacket {
	var out []nflogPacket
	for len(b) >= unix.NLMSG_HDRLEN && len(out) < maxNflogPackets {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		body := b[unix.NLMSG_HDRLEN:l]
		if typ == unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket && len(body) >= sizeofNfgenmsg {
			if p, ok := parseNflogPacket(body[sizeofNfgenmsg:]); ok {
				out = append(out, p)
			}
		}
		next := nlAlign(l)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return out
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// parseNflogPacket reads the attributes of one packet message.
func parseNflogPacket(attrs []byte) (nflogPacket, bool) {
	var p nflogPacket
	var payload []byte
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs[0:2]))
		typ := binary.NativeEndian.Uint16(attrs[2:4]) & nlaTypeMask
		if l < 4 || l > len(attrs) {
			break
		}
		v := attrs[4:l]
		switch typ {
		case nfulaPrefix:
			if i := strings.IndexByte(string(v), 0); i >= 0 {
				v = v[:i]
			}
			if len(v) > 64 {
				v = v[:64]
			}
			p.Prefix = string(v)
		case nfulaPayload:
			payload = v
		}
		next := nlAlign(l)
		if next >= len(attrs) {
			break
		}
		attrs = attrs[next:]
	}
	if payload == nil {
		return p, false
	}
	return p, parseIPv4(payload, &p)
}

// parseIPv4 fills p's addresses, protocol and port from an IPv4 header.
func parseIPv4(b []byte, p *nflogPacket) bool {
	if len(b) < 20 || b[0]>>4 != 4 {
		return false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || ihl > len(b) {
		return false
	}
	p.Proto = b[9]
	p.Src = netip.AddrFrom4([4]byte(b[12:16]))
	p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
	if (p.Proto == unix.IPPROTO_TCP || p.Proto == unix.IPPROTO_UDP) && fragOff == 0 && len(b) >= ihl+4 {
		p.Port = binary.BigEndian.Uint16(b[ihl+2 : ihl+4])
	}
	return true
}

// nflogPrefix is the prefix of a sandbox's NFLOG rule: "hc <key> <reason>".
func nflogPrefix(key, reason string) string {
	return nflogPrefixMagic + " " + key + " " + reason
}

// parseNflogPrefix splits a prefix made by nflogPrefix.
func parseNflogPrefix(s string) (key, reason string, ok bool) {
	f := strings.Fields(s)
	if len(f) != 3 || f[0] != nflogPrefixMagic {
		return "", "", false
	}
	return f[1], f[2], true
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	}
	return fmt.Sprint(p)
}

// nflogGroups are the groups a network's daemon tries, first to last: the
// network's own hashed group, then a few after it in case another daemon
// (of another network) holds it. Low groups are left to other software.
func nflogGroups(network string, subnet netip.Prefix) []uint16 {
	h := sha256.Sum256([]byte("nflog|" + network + "|" + subnet.String()))
	first := 0x4000 + binary.BigEndian.Uint16(h[:2])%0x3000
	out := make([]uint16, 8)
	for i := range out {
		out[i] = first + uint16(i)
	}
	return out
}

// nflogConn is a NETLINK_NETFILTER socket bound to one nfnetlink_log group.
type nflogConn struct {
	f      *os.File
	rc     syscall.RawConn
	group  uint16
	closed atomic.Bool
}

// openNflog binds the first free group of groups.
func openNflog(groups []uint16) (*nflogConn, error) {
	var errs []error
	for _, g := range groups {
		c, err := openNflogGroup(g)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("group %d: %w", g, err))
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	return nil, fmt.Errorf("open nflog socket: %w", errors.Join(errs...))
}

func openNflogGroup(group uint16) (*nflogConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	// Room for bursts while the reader is busy; the kernel says ENOBUFS
	// when it overflows, and the packets are still counted by the rules.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	// The configuration is synchronous, with acks; bound each wait.
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("set receive timeout: %w", err)
	}
	seq := uint32(0)
	cfg := func(family uint8, group uint16, attrType uint16, val []byte) error {
		seq++
		if err := unix.Sendto(fd, nflogConfigMsg(seq, family, group, attrType, val), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		return waitAck(fd, seq)
	}
	// PF_UNBIND/PF_BIND matter on kernels before 3.17 only; newer ones
	// accept and ignore them.
	_ = cfg(unix.AF_INET, 0, nfulaCfgCmd, []byte{nfulnlCfgCmdPfUnbind})
	_ = cfg(unix.AF_INET, 0, nfulaCfgCmd, []byte{nfulnlCfgCmdPfBind})
	if err := cfg(unix.AF_UNSPEC, group, nfulaCfgCmd, []byte{nfulnlCfgCmdBind}); err != nil {
		return nil, fmt.Errorf("bind group: %w", err)
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode[0:4], nflogCopy)
	mode[4] = nfulnlCopyPacket
	if err := cfg(unix.AF_UNSPEC, group, nfulaCfgMode, mode); err != nil {
		return nil, fmt.Errorf("set copy mode: %w", err)
	}
	// One packet per message, sent at once: the log should be live.
	q := binary.BigEndian.AppendUint32(nil, 1)
	_ = cfg(unix.AF_UNSPEC, group, nfulaCfgQthresh, q)

	tv = unix.Timeval{}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set nonblocking: %w", err)
	}
	// A non-blocking fd in an os.File goes through the runtime poller, so
	// Close wakes a blocked read.
	f := os.NewFile(uintptr(fd), "nflog")
	ok = true
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raw conn: %w", err)
	}
	return &nflogConn{f: f, rc: rc, group: group}, nil
}

// nflogConfigMsg builds one NFULNL_MSG_CONFIG request with one attribute.
func nflogConfigMsg(seq uint32, family uint8, group uint16, attrType uint16, val []byte) []byte {
	attrLen := 4 + len(val)
	l := unix.NLMSG_HDRLEN + sizeofNfgenmsg + nlAlign(attrLen)
	b := make([]byte, l)
	binary.NativeEndian.PutUint32(b[0:4], uint32(l))
	binary.NativeEndian.PutUint16(b[4:6], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(b[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	b[16] = family
	b[17] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(b[18:20], group)
	binary.NativeEndian.PutUint16(b[20:22], uint16(attrLen))
	binary.NativeEndian.PutUint16(b[22:24], attrType)
	copy(b[24:], val)
	return b
}

// waitAck reads until the ack of request seq and returns its error.
func waitAck(fd int, seq uint32) error {
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("read ack: %w", err)
		}
		b := buf[:n]
		for len(b) >= unix.NLMSG_HDRLEN {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			typ := binary.NativeEndian.Uint16(b[4:6])
			s := binary.NativeEndian.Uint32(b[8:12])
			if typ == unix.NLMSG_ERROR && s == seq && l >= unix.NLMSG_HDRLEN+4 {
				if e := int32(binary.NativeEndian.Uint32(b[16:20])); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			}
			if nlAlign(l) >= len(b) {
				break
			}
			b = b[nlAlign(l):]
		}
	}
}

// read receives one datagram into buf; it returns when the socket is
// closed.
func (c *nflogConn) read(buf []byte) (int, error) {
	var n int
	var rerr error
	err := c.rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN && rerr != unix.EWOULDBLOCK
	})
	if err != nil {
		if c.closed.Load() {
			// RawConn says "use of closed file" (internal/poll's error),
			// not os.ErrClosed, when close wakes the read.
			return 0, os.ErrClosed
		}
		return 0, err
	}
	return n, rerr
}

func (c *nflogConn) close() error {
	c.closed.Store(true)
	return c.f.Close()
}
