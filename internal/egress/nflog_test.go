package egress

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// nlAttr encodes one netlink attribute, padded.
func nlAttr(typ uint16, val []byte) []byte {
	b := make([]byte, nlAlign(4+len(val)))
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(val)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], val)
	return b
}

// nlPacketMsg encodes one NFULNL_MSG_PACKET message with attrs.
func nlPacketMsg(attrs ...[]byte) []byte {
	body := []byte{unix.AF_INET, 0, 0x40, 0x01} // nfgenmsg, group 0x4001
	for _, a := range attrs {
		body = append(body, a...)
	}
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(b[0:4], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(b[4:6], unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket)
	return append(b, body...)
}

// ipv4 builds an IPv4 header (with optLen bytes of options) and the first
// four bytes of a transport header carrying sport and dport.
func ipv4(proto uint8, src, dst string, optLen int, fragOff uint16, dport uint16) []byte {
	ihl := 20 + optLen
	b := make([]byte, ihl+4)
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[6:8], fragOff)
	b[8] = 64
	b[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[ihl:], 40000)
	binary.BigEndian.PutUint16(b[ihl+2:], dport)
	return b
}

func prefixAttr(s string) []byte { return nlAttr(nfulaPrefix, append([]byte(s), 0)) }

func TestParseNflog(t *testing.T) {
	tcp := ipv4(unix.IPPROTO_TCP, "10.213.0.5", "198.18.7.11", 0, 0, 80)
	cases := []struct {
		name string
		in   []byte
		want []nflogPacket
	}{
		{"tcp", nlPacketMsg(prefixAttr("hc abc not-allowed"), nlAttr(nfulaPayload, tcp)),
			[]nflogPacket{{Prefix: "hc abc not-allowed", Src: netip.MustParseAddr("10.213.0.5"), Dst: netip.MustParseAddr("198.18.7.11"), Proto: 6, Port: 80}}},
		{"udp with ip options", nlPacketMsg(nlAttr(nfulaPayload, ipv4(unix.IPPROTO_UDP, "10.0.0.1", "10.0.0.2", 8, 0, 53)), prefixAttr("hc k host")),
			[]nflogPacket{{Prefix: "hc k host", Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: 17, Port: 53}}},
		{"icmp has no port", nlPacketMsg(nlAttr(nfulaPayload, ipv4(unix.IPPROTO_ICMP, "10.0.0.1", "169.254.169.254", 0, 0, 99))),
			[]nflogPacket{{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("169.254.169.254"), Proto: 1}}},
		{"later fragment has no port", nlPacketMsg(nlAttr(nfulaPayload, ipv4(unix.IPPROTO_TCP, "10.0.0.1", "10.0.0.2", 0, 185, 80))),
			[]nflogPacket{{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: 6}}},
		{"header cut before the ports", nlPacketMsg(nlAttr(nfulaPayload, tcp[:22])),
			[]nflogPacket{{Src: netip.MustParseAddr("10.213.0.5"), Dst: netip.MustParseAddr("198.18.7.11"), Proto: 6}}},
		{"two messages", append(nlPacketMsg(nlAttr(nfulaPayload, tcp)), nlPacketMsg(nlAttr(nfulaPayload, tcp))...),
			[]nflogPacket{{Src: netip.MustParseAddr("10.213.0.5"), Dst: netip.MustParseAddr("198.18.7.11"), Proto: 6, Port: 80}, {Src: netip.MustParseAddr("10.213.0.5"), Dst: netip.MustParseAddr("198.18.7.11"), Proto: 6, Port: 80}}},
		{"no payload", nlPacketMsg(prefixAttr("hc abc host")), nil},
		{"ipv6 payload", nlPacketMsg(nlAttr(nfulaPayload, append([]byte{0x60}, make([]byte, 39)...))), nil},
		{"ihl beyond payload", nlPacketMsg(nlAttr(nfulaPayload, func() []byte { b := append([]byte{}, tcp[:20]...); b[0] = 0x4f; return b }())), nil},
		{"ihl too small", nlPacketMsg(nlAttr(nfulaPayload, func() []byte { b := append([]byte{}, tcp...); b[0] = 0x44; return b }())), nil},
		{"short", []byte{1, 2, 3}, nil},
		{"length beyond buffer", func() []byte {
			b := nlPacketMsg(nlAttr(nfulaPayload, tcp))
			binary.NativeEndian.PutUint32(b, 9999)
			return b
		}(), nil},
		{"attribute beyond message", func() []byte {
			b := nlPacketMsg(nlAttr(nfulaPayload, tcp))
			binary.NativeEndian.PutUint16(b[20:22], 500)
			return b
		}(), nil},
		{"other message type", func() []byte {
			b := nlPacketMsg(nlAttr(nfulaPayload, tcp))
			binary.NativeEndian.PutUint16(b[4:6], unix.NLMSG_ERROR)
			return b
		}(), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := parseNflog(tc.in)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("parseNflog (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNflogPrefix(t *testing.T) {
	for _, tc := range []struct {
		in          string
		key, reason string
		ok          bool
	}{
		{nflogPrefix("abc123", reasonNotAllowed), "abc123", "not-allowed", true},
		{"hc abc", "", "", false},
		{"xx abc host", "", "", false},
		{"hc a b c", "", "", false},
		{"", "", "", false},
	} {
		k, r, ok := parseNflogPrefix(tc.in)
		if k != tc.key || r != tc.reason || ok != tc.ok {
			t.Errorf("parseNflogPrefix(%q) = %q, %q, %v; want %q, %q, %v", tc.in, k, r, ok, tc.key, tc.reason, tc.ok)
		}
	}
}

func FuzzParseNflog(f *testing.F) {
	tcp := ipv4(unix.IPPROTO_TCP, "10.213.0.5", "198.18.7.11", 4, 0, 443)
	f.Add(nlPacketMsg(prefixAttr("hc abc not-allowed"), nlAttr(nfulaPayload, tcp)))
	f.Add(append(nlPacketMsg(nlAttr(nfulaPayload, tcp)), nlPacketMsg(prefixAttr("hc x host"))...))
	f.Add(nlPacketMsg(nlAttr(nfulaPayload, tcp[:21])))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ps := parseNflog(b)
		if len(ps) > maxNflogPackets {
			t.Fatalf("got %d packets, want at most %d", len(ps), maxNflogPackets)
		}
		for _, p := range ps {
			if !p.Dst.Is4() || !p.Src.Is4() || len(p.Prefix) > 64 {
				t.Fatalf("bad packet %+v", p)
			}
			if p.Port != 0 && p.Proto != unix.IPPROTO_TCP && p.Proto != unix.IPPROTO_UDP {
				t.Fatalf("port %d on protocol %d", p.Port, p.Proto)
			}
		}
	})
}

func TestNflogConfigMsg(t *testing.T) {
	b := nflogConfigMsg(7, unix.AF_UNSPEC, 0x4123, nfulaCfgCmd, []byte{nfulnlCfgCmdBind})
	if len(b) != 28 || binary.NativeEndian.Uint32(b) != 28 {
		t.Fatalf("got length %d (header says %d), want 28", len(b), binary.NativeEndian.Uint32(b))
	}
	if got := binary.NativeEndian.Uint16(b[4:6]); got != unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig {
		t.Errorf("got type %#x", got)
	}
	if got := binary.BigEndian.Uint16(b[18:20]); got != 0x4123 {
		t.Errorf("got group %#x, want 0x4123 (big-endian)", got)
	}
	if got := binary.NativeEndian.Uint16(b[20:22]); got != 5 || b[24] != nfulnlCfgCmdBind {
		t.Errorf("got attribute length %d, command %d", got, b[24])
	}
}

func TestRecordDenial(t *testing.T) {
	c := New(nil, Config{})
	c.fw = newFirewall(noRules{}, fakeSets{newFakeIPT()}, "net", netip.MustParsePrefix("10.213.0.0/16"), netip.MustParseAddr("10.213.0.1"), nil, nil)
	c.nfl = &nflogConn{} // the log is "available"; nothing is read
	c.mu.Lock()
	c.state("sb-abc123")
	c.mu.Unlock()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	pkt := func(dst string, port uint16, reason string) nflogPacket {
		return nflogPacket{Prefix: nflogPrefix("abc123", reason), Dst: netip.MustParseAddr(dst), Src: netip.MustParseAddr("10.213.0.2"), Proto: 6, Port: port}
	}
	c.recordDenial(t0, pkt("198.18.0.11", 80, reasonNotAllowed))
	c.recordDenial(t0.Add(time.Second), pkt("198.18.0.11", 80, reasonNotAllowed)) // a retransmission
	c.recordDenial(t0.Add(2*time.Second), pkt("169.254.169.254", 80, reasonLinkLocal))
	c.recordDenial(t0.Add(3*time.Second), nflogPacket{Prefix: nflogPrefix("other", reasonHost), Dst: netip.MustParseAddr("10.0.0.1")}) // no such sandbox
	c.recordDenial(t0.Add(30*time.Second), pkt("198.18.0.11", 80, reasonNotAllowed))                                                   // after the window
	got := c.Status("sb-abc123", wire.EgressPolicy{}).Denied
	want := []wire.EgressDenial{
		{Time: t0, Kind: wire.DenialConnect, Packets: 2, Address: "198.18.0.11", Protocol: "tcp", Port: 80, Reason: reasonNotAllowed},
		{Time: t0.Add(2 * time.Second), Kind: wire.DenialConnect, Packets: 1, Address: "169.254.169.254", Protocol: "tcp", Port: 80, Reason: reasonLinkLocal},
		{Time: t0.Add(30 * time.Second), Kind: wire.DenialConnect, Packets: 1, Address: "198.18.0.11", Protocol: "tcp", Port: 80, Reason: reasonNotAllowed},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("denials (-want +got):\n%s", diff)
	}
	// The ring keeps the newest maxDenied.
	for i := range 2 * maxDenied {
		c.recordDenial(t0.Add(time.Minute), pkt("198.18.1.1", uint16(1000+i), reasonNotAllowed))
	}
	got = c.Status("sb-abc123", wire.EgressPolicy{}).Denied
	if len(got) != maxDenied || got[len(got)-1].Port != 1000+2*maxDenied-1 {
		t.Errorf("got %d entries ending with port %d, want %d ending with %d", len(got), got[len(got)-1].Port, maxDenied, 1000+2*maxDenied-1)
	}
	// Forgetting the sandbox frees its key: later packets go nowhere.
	_ = c.Forget(t.Context(), "sb-abc123")
	if _, ok := c.byKey["abc123"]; ok {
		t.Error("the forgotten sandbox's key is still known")
	}
}

// noRules is a firewall with no rules at all.
type noRules struct{ iptablesAPI }

func (noRules) List(table, chain string) ([]string, error) { return nil, nil }
func (noRules) ListChains(table string) ([]string, error)  { return nil, nil }

// TestNflogLive binds a group in a private network namespace, logs a UDP
// packet sent to loopback there with an NFLOG rule, and reads it back:
// the socket code against the real kernel, touching nothing of the host.
func TestNflogLive(t *testing.T) {
	testenv.RequireRoot(t, "a network namespace and iptables")
	type result struct {
		p   nflogPacket
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread is left in the new namespace and dies with the
		// goroutine: no UnlockOSThread.
		runtime.LockOSThread()
		res := func() result {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return result{err: fmt.Errorf("unshare: %w", err)}
			}
			ns := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
			in := func(args ...string) error {
				out, err := exec.Command("nsenter", append([]string{"--net=" + ns}, args...)...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %w: %s", args, err, out)
				}
				return nil
			}
			c, err := openNflog([]uint16{20464})
			if err != nil {
				return result{err: err}
			}
			defer c.close()
			if err := in("ip", "link", "set", "lo", "up"); err != nil {
				return result{err: err}
			}
			if err := in("iptables", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9",
				"-j", "NFLOG", "--nflog-group", "20464", "--nflog-prefix", nflogPrefix("live", reasonHost), "--nflog-size", "64"); err != nil {
				return result{err: err}
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return result{err: err}
			}
			defer unix.Close(fd)
			if err := unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 9}}); err != nil {
				return result{err: fmt.Errorf("send: %w", err)}
			}
			time.AfterFunc(5*time.Second, func() { c.close() })
			buf := make([]byte, 64<<10)
			for {
				n, err := c.read(buf)
				if err != nil {
					return result{err: fmt.Errorf("read: %w", err)}
				}
				if ps := parseNflog(buf[:n]); len(ps) > 0 {
					return result{p: ps[0]}
				}
			}
		}()
		done <- res
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := nflogPacket{Prefix: "hc live host", Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.9"), Proto: unix.IPPROTO_UDP, Port: 9}
	if r.p != want {
		t.Errorf("got %+v, want %+v", r.p, want)
	}
}
