// Command netprobe is run inside a sandbox by the hostile network tests: it
// does what busybox cannot (UDP with SO_BROADCAST, DNS queries of any type,
// query floods) and prints one line per result.
//
//	netprobe udp ADDR:PORT             send a datagram, print "reply: ..." or "no reply"
//	netprobe tcp ADDR:PORT             connect, print "connected: ..." or "error: ..."
//	netprobe dns SERVER TYPE NAME      one query, print its rcode and answers
//	netprobe flood SERVER TYPE FORMAT N [MS]  N queries of fmt.Sprintf(FORMAT, i), MS
//	                                          milliseconds apart, print rcode counts
package main

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: netprobe udp|dns|flood ...")
	}
	switch args := os.Args[2:]; os.Args[1] {
	case "udp":
		udp(args[0])
	case "tcp":
		c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		c.Close()
		fmt.Printf("connected: %q\n", buf[:n])
	case "dns":
		q := query(args[1], args[2])
		fmt.Println(exchange(args[0], q))
	case "flood":
		n, _ := strconv.Atoi(args[3])
		var every time.Duration
		if len(args) > 4 {
			ms, _ := strconv.Atoi(args[4])
			every = time.Duration(ms) * time.Millisecond
		}
		flood(args[0], args[1], args[2], n, every)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}

func udp(to string) {
	raddr, err := net.ResolveUDPAddr("udp4", to)
	if err != nil {
		fail(err.Error())
	}
	c, err := net.ListenUDP("udp4", nil)
	if err != nil {
		fail(err.Error())
	}
	defer c.Close()
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
		})
	}
	if _, err := c.WriteToUDP([]byte("probe from a sandbox"), raddr); err != nil {
		fmt.Println("send error:", err)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, from, err := c.ReadFromUDP(buf)
	if err != nil {
		fmt.Println("no reply")
		return
	}
	fmt.Printf("reply: %s from %s\n", buf[:n], from)
}

func query(typ, name string) *dns.Msg {
	t, ok := dns.StringToType[strings.ToUpper(typ)]
	if !ok {
		fail("unknown type " + typ)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), t)
	return q
}

func exchange(server string, q *dns.Msg) string {
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	resp, _, err := c.Exchange(q, net.JoinHostPort(server, "53"))
	if err != nil {
		return "error"
	}
	var b strings.Builder
	b.WriteString(dns.RcodeToString[resp.Rcode])
	for _, rr := range resp.Answer {
		b.WriteString(" " + strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return b.String()
}

func flood(server, typ, format string, n int, every time.Duration) {
	counts := map[string]int{}
	for i := range n {
		time.Sleep(every)
		counts[strings.Fields(exchange(server, query(typ, fmt.Sprintf(format, i))))[0]]++
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s=%d\n", k, counts[k])
	}
}
