// Package k8scluster tests the test cluster itself (scripts/k8s): a pod
// from an image imported from the host's Docker Engine runs, kubectl exec
// carries output, stdin and exit codes, and a pod reaches a listener on
// the host's bridge-side address, which is what hotcell's Kubernetes driver
// relies on.
package k8scluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// TestClusterPodExecAndHostReach runs a pod of hotcell/base in a namespace
// of its own, reads its log and drives it with kubectl exec: stdout and
// stderr apart, the remote exit code, stdin; then the pod dials a TCP
// listener the test opens on the host's bridge-side address and the two
// talk, and another through a ClusterIP Service (kube-proxy), which keeps
// the pod's address as the source; the pod has no default route (pods
// reach nothing off the node).
// The namespace is gone when the test ends.
func TestClusterPodExecAndHostReach(t *testing.T) {
	k := testk8s.Cluster(t)
	img := testenv.BaseImage(t)
	k.ImportImage(t, img)
	ns := k.Namespace(t)

	pod := `apiVersion: v1
kind: Pod
metadata:
  name: smoke
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: ` + img + `
    imagePullPolicy: Never
    command: ["sh", "-c", "echo started as $(id -un); exec sleep infinity"]
`
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := k.Kubectl(ctx, strings.NewReader(pod), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Kubectl(ctx, nil, "-n", ns, "wait", "--for=condition=Ready", "--timeout=120s", "pod/smoke"); err != nil {
		desc, _ := k.Kubectl(ctx, nil, "-n", ns, "describe", "pod/smoke")
		t.Fatalf("%v\n%s", err, desc)
	}
	type seen struct {
		from, line string
		err        error
	}
	podIP := strings.TrimSpace(k.MustKubectl(t, "-n", ns, "get", "pod/smoke", "-o", "jsonpath={.status.podIP}"))

	// The container's output reaches kubectl logs (the kubelet keeps pods'
	// logs under the state directory, not /var/log/pods).
	if logs := k.MustKubectl(t, "-n", ns, "logs", "smoke"); logs != "started as root\n" {
		t.Fatalf("kubectl logs: %q, want started as root", logs)
	}

	// Output and exit code.
	out, err := k.Kubectl(ctx, nil, "-n", ns, "exec", "smoke", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	var xe *testk8s.ExitError
	if !errors.As(err, &xe) || xe.Code != 7 {
		t.Fatalf("exec exit 7: got err %v", err)
	}
	if out != "out\n" || !strings.Contains(xe.Stderr, "err\n") {
		t.Fatalf("exec: stdout %q, stderr %q; want out, err", out, xe.Stderr)
	}
	if out, err := k.Kubectl(ctx, nil, "-n", ns, "exec", "smoke", "--", "id", "-un"); err != nil || out != "root\n" {
		t.Fatalf("exec id -un: %q, %v", out, err)
	}
	// Stdin.
	if out, err := k.Kubectl(ctx, strings.NewReader("line one\nline two\n"), "-n", ns, "exec", "-i", "smoke", "--", "wc", "-l"); err != nil || strings.TrimSpace(out) != "2" {
		t.Fatalf("exec -i wc -l: %q, %v", out, err)
	}

	// The pod reaches the host's bridge-side address, and a ClusterIP
	// Service leading there: kube-proxy translates it, keeping the pod's
	// address as the source.
	hostListener := func() (*net.TCPAddr, <-chan seen) {
		ln, err := net.Listen("tcp", net.JoinHostPort(k.HostIP, "0"))
		if err != nil {
			t.Fatalf("listen on the host's bridge address %s: %v", k.HostIP, err)
		}
		t.Cleanup(func() { ln.Close() })
		got := make(chan seen, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- seen{err: err}
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil {
				_, err = fmt.Fprintf(c, "pong %s\n", strings.TrimSpace(line))
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			got <- seen{from: host, line: line, err: err}
		}()
		return ln.Addr().(*net.TCPAddr), got
	}
	dial := func(what string, to netip.AddrPort, got <-chan seen) {
		t.Helper()
		script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && echo ping-$(hostname) >&3 && head -n1 <&3", to.Addr(), to.Port())
		out, err := k.Kubectl(ctx, nil, "-n", ns, "exec", "smoke", "--", "bash", "-c", script)
		if err != nil {
			t.Fatalf("pod dialling %s %s: %v", what, to, err)
		}
		var s seen
		select {
		case s = <-got:
		case <-ctx.Done():
			t.Fatalf("%s: the listener saw no connection", what)
		}
		if s.err != nil {
			t.Fatalf("%s: host side: %v", what, s.err)
		}
		if s.line != "ping-smoke\n" || out != "pong ping-smoke\n" {
			t.Fatalf("%s: host read %q and the pod %q; want ping-smoke and pong ping-smoke", what, s.line, out)
		}
		if s.from != podIP {
			t.Fatalf("%s: connection from %s, want the pod's address %s", what, s.from, podIP)
		}
	}
	direct, got := hostListener()
	dial("the host's bridge address", netip.AddrPortFrom(netip.MustParseAddr(k.HostIP), uint16(direct.Port)), got)
	behind, got := hostListener()
	svc := k.NewService(t, ns, "to-host", 80, netip.AddrPortFrom(netip.MustParseAddr(k.HostIP), uint16(behind.Port)))
	dial("a Service", svc.Addr(), got)

	// No default route in the pod: it reaches the node's bridge, nothing beyond.
	routes := k.MustKubectl(t, "-n", ns, "exec", "smoke", "--", "cat", "/proc/net/route")
	for _, l := range strings.Split(routes, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "00000000" {
			t.Fatalf("the pod has a default route:\n%s", routes)
		}
	}
}
