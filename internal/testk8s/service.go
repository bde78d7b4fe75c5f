package testk8s

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
)

// Service is a ClusterIP Service of the test cluster without a selector,
// whose one endpoint the test names: the cluster's kube-proxy translates
// the Service's address to it, as it would to a Deployment's pods, and
// the test moves it (To) where a readiness probe would.
type Service struct {
	env       *Env
	ns, name  string
	Port      int
	ClusterIP netip.Addr
}

// NewService makes Service name in namespace ns, port port, with its
// endpoint at to, and returns it once kube-proxy sends its cluster IP
// there. The namespace's deletion removes it.
func (e *Env) NewService(t testing.TB, ns, name string, port int, to netip.AddrPort) *Service {
	t.Helper()
	s := &Service{env: e, ns: ns, name: name, Port: port}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
spec:
  type: ClusterIP
  ports:
  - name: tcp
    protocol: TCP
    port: %d
`, name, port)
	if _, err := e.kubectl(ctx, strings.NewReader(svc), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	ip, err := e.kubectl(ctx, nil, "-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatal(err)
	}
	if s.ClusterIP, err = netip.ParseAddr(strings.TrimSpace(ip)); err != nil {
		t.Fatalf("service %s/%s: cluster IP %q: %v", ns, name, ip, err)
	}
	s.To(t, to)
	return s
}

// waitProgrammed waits until the node's kube-proxy sends the Service's
// new connections to to and nowhere else: its service-ips map lists the
// Service, and the Service's chain has to as its one endpoint. So what a
// test sees through the Service is the endpoint's doing, not kube-proxy's
// yet to come.
func (s *Service) waitProgrammed(t testing.TB, to netip.AddrPort) {
	t.Helper()
	testenv.RequireRoot(t, "reading kube-proxy's nftables rules")
	entry := fmt.Sprintf("%s . tcp . %d : goto ", s.ClusterIP, s.Port)
	chain := fmt.Sprintf("-%s/%s/tcp/tcp {", s.ns, s.name)
	endpoint := fmt.Sprintf("map { 0 : %s . %d }", to.Addr(), to.Port())
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
		if err == nil && strings.Contains(string(out), entry) {
			if _, rules, ok := strings.Cut(string(out), chain); ok {
				rules, _, _ = strings.Cut(rules, "\n\t}") // the chain's end
				if strings.Contains(rules, endpoint) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy has not sent service %s/%s (%s:%d) to %s after a minute (is it running? sudo scripts/k8s status): %v\n%s", s.ns, s.name, s.ClusterIP, s.Port, to, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Addr is the Service's address and port, as a pod dials it.
func (s *Service) Addr() netip.AddrPort {
	return netip.AddrPortFrom(s.ClusterIP, uint16(s.Port))
}

// To makes to the Service's one endpoint, in place of the one it had, and
// returns once kube-proxy sends new connections there (about a second).
func (s *Service) To(t testing.TB, to netip.AddrPort) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slice := fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s-test
  labels:
    kubernetes.io/service-name: %s
    endpointslice.kubernetes.io/managed-by: hotcell-tests
addressType: IPv4
endpoints:
- addresses: ["%s"]
  conditions: {ready: true}
ports:
- name: tcp
  protocol: TCP
  port: %d
`, s.name, s.name, to.Addr(), to.Port())
	if _, err := s.env.kubectl(ctx, strings.NewReader(slice), "-n", s.ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	s.waitProgrammed(t, to)
}
