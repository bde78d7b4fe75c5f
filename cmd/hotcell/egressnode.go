package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/kubeegress"
)

func (a *app) egressNodeCmd() *cobra.Command {
	var (
		kubeconfig, namespace, node, resolver, bridge, podRange, logFormat, rules, metricsAddr string
		upstreams, allowed, allowPrivate                                                       []string
		teardown, force                                                                        bool
	)
	cmd := &cobra.Command{
		Use:   "egress-node [flags]",
		Short: "Enforce sandboxes' egress policies on this Kubernetes node",
		Long: `Run hotcell's egress controller for one Kubernetes node: it watches the node's
hotcell pods, puts each pod's egress policy in force with the same iptables and
ipset rules that confine sandboxes on Docker (keyed by the pod's address), and
serves the DNS resolver the pods are pinned to (their dnsConfig names
--resolver). It is meant to run on every node as a privileged DaemonSet with
hostNetwork (docs/kubernetes.md, "Egress"); it needs root, iptables and ipset.

--resolver is the same on every node: the nodes' common gateway on the pod
network, or, where their gateways differ, a link-local address such as
169.254.20.53, which egress-node puts on the node's loopback (labelled
lo:hotcell-dns) and --teardown takes off.

The rules outlive it: stopping it leaves the pods confined, and a new one takes
them over. To uninstall, once the node has no sandbox pod left, --teardown
removes the node's rule set (give the same --node, --pod-range and --rules)
and exits. Its credential needs get, list, watch and patch on pods in the
sandboxes' namespace.

With --metrics-listen it serves Prometheus metrics at /metrics there: the
egress counters of each sandbox on this node (dropped packets and bytes,
refused and answered DNS queries, logged denials), named and labelled as the
daemon's for Docker boxes; and its readiness at /readyz (200 once the resolver,
the rules and a first pass over the node's pods are done, else 503: the
manifest's readiness probe). Bind it to the node's address (the manifest uses
$(HOST_IP)); sandboxes are refused the node's ports in every mode.`,
		Example: `  hotcell egress-node --node "$NODE_NAME" --resolver 10.244.0.1 --bridge cni0 \
    --pod-range 10.244.0.0/16 --allow 10.244.0.1:7443
  hotcell egress-node --node "$NODE_NAME" --resolver 10.244.0.1 --pod-range 10.244.0.0/16 \
    --metrics-listen "$HOST_IP:9469"
  # every node of a multi-node cluster: one resolver address for all
  hotcell egress-node --node "$NODE_NAME" --resolver 169.254.20.53 --pod-range 10.244.0.0/16
  hotcell egress-node --node "$NODE_NAME" --pod-range 10.244.0.0/16 --teardown
  kubectl -n hotcell apply -f deploy/kubernetes/egress-node-teardown.yaml   # every node`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				node = a.getenv("NODE_NAME")
			}
			if node == "" {
				return usageError{errors.New("--node (or NODE_NAME) is required: the name of this node")}
			}
			pods, err := netip.ParsePrefix(podRange)
			if err != nil || !pods.Addr().Is4() {
				return usageError{fmt.Errorf("--pod-range %q must be the cluster's IPv4 pod range, such as 10.244.0.0/16", podRange)}
			}
			if rules == "" {
				rules = "k8s-" + node
			}
			cfg := egress.Config{Network: rules, Subnet: pods.Masked(), Node: true}
			if teardown {
				// Not under sandboxes that still run: their rules are
				// what confines them.
				if !force {
					if err := a.teardownCheck(cmd.Context(), kubeconfig, namespace, node); err != nil {
						return err
					}
				}
				// The rule set is keyed by its name and the pod range:
				// nothing else is needed to find it.
				if err := egress.TeardownConfig(cfg); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "removed egress rule set %s of node %s\n", rules, node)
				// The link-local resolver address, if egress-node put one
				// on the node.
				if err := kubeegress.RemoveResolverAddrs(); err != nil {
					return err
				}
				return nil
			}
			res, err := netip.ParseAddr(resolver)
			if err != nil || !res.Is4() {
				return usageError{fmt.Errorf("--resolver %q must be an IPv4 address: this node's on the pod network, or a link-local one (169.254.0.0/16) the same on every node", resolver)}
			}
			for _, s := range allowed {
				ap, err := netip.ParseAddrPort(s)
				if err != nil || !ap.Addr().Is4() {
					return usageError{fmt.Errorf("--allow %q must be an IPv4 address and port, such as 10.0.0.5:7443", s)}
				}
				cfg.Allowed = append(cfg.Allowed, ap)
			}
			for _, s := range allowPrivate {
				p, err := netip.ParsePrefix(s)
				if err != nil || !p.Addr().Is4() {
					return usageError{fmt.Errorf("--allow-private %q must be an IPv4 CIDR", s)}
				}
				cfg.AllowPrivate = append(cfg.AllowPrivate, p.Masked())
			}
			if len(upstreams) == 0 {
				if upstreams, err = resolvConfServers("/etc/resolv.conf"); err != nil || len(upstreams) == 0 {
					return usageError{fmt.Errorf("--upstream is not set and /etc/resolv.conf names no nameserver (%v)", err)}
				}
			}
			for _, u := range upstreams {
				if _, err := netip.ParseAddr(u); err == nil {
					u = net.JoinHostPort(u, "53")
				}
				ap, err := netip.ParseAddrPort(u)
				if err != nil || ap.Port() == 0 {
					return usageError{fmt.Errorf("--upstream %q must be an address with an optional :port", u)}
				}
				cfg.Upstreams = append(cfg.Upstreams, ap.String())
			}
			if metricsAddr != "" {
				if _, port, err := net.SplitHostPort(metricsAddr); err != nil || port == "" {
					return usageError{fmt.Errorf("--metrics-listen %q must be host:port, such as 10.0.0.5:9469", metricsAddr)}
				}
			}
			rc, err := kubernetes.RESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			rc.UserAgent = "hotcell-egress-node"
			client, err := kubernetes.NewClient(rc)
			if err != nil {
				return err
			}
			log := newLoggerFormat(a, logFormat)
			n := kubeegress.NewNode(kubeegress.NodeConfig{
				Client:    client,
				Namespace: namespace,
				NodeName:  node,
				Resolver:  res,
				Bridge:    bridge,
				Egress:    cfg,
				Log:       log,
			})
			if metricsAddr != "" {
				// Listened on before the rules start: a taken address
				// fails the start, not a scrape later.
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-listen: %w", err)
				}
				srv := &http.Server{Handler: n.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
				go func() {
					if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
						log.Error("metrics server stopped", "err", err)
					}
				}()
				defer srv.Close()
				log.Info("serving metrics", "addr", ln.Addr().String())
			}
			if err := n.Run(cmd.Context()); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("egress-node: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account, then $KUBECONFIG)")
	f.StringVar(&namespace, "namespace", kubernetes.DefaultNamespace, "namespace of the sandboxes' pods")
	f.StringVar(&node, "node", "", "this node's name (default $NODE_NAME)")
	f.StringVar(&resolver, "resolver", "", "where the resolver listens, the daemon's kubernetes_egress_resolver: this node's address on the pod network, or a link-local address (169.254.0.0/16) the same on every node, which egress-node puts on the node's loopback")
	f.StringVar(&bridge, "bridge", "", "the pod network's bridge on this node, from which IPv6 is dropped (required on a node with IPv6)")
	f.StringVar(&podRange, "pod-range", "", "the cluster's pod range (other pods are refused as other sandboxes)")
	f.StringSliceVar(&upstreams, "upstream", nil, "resolver that allowed names are forwarded to, host[:port] (default: /etc/resolv.conf's)")
	f.StringSliceVar(&allowed, "allow", nil, "TCP endpoint every sandbox reaches in every mode, addr:port (repeat): the daemon's agent channel, and its LLM gateway when it serves one")
	f.StringSliceVar(&allowPrivate, "allow-private", nil, "private IPv4 network sandboxes may reach (egress_allow_private)")
	f.StringVar(&rules, "rules", "", "name of this node's rule set, which its chains, sets and denial log group are keyed by (default k8s-<node>); only two controllers on one node, such as tests beside a real one, need different ones")
	f.BoolVar(&teardown, "teardown", false, "remove this node's rule set (chains and sets) and exit, to uninstall once no sandbox pod is left (refused while the API server lists one on this node)")
	f.BoolVar(&force, "force", false, "with --teardown: remove the rules even though sandbox pods still run on this node (they are no longer confined)")
	f.StringVar(&metricsAddr, "metrics-listen", "", "serve Prometheus metrics (this node's sandboxes' egress counters) at http://ADDR/metrics and readiness at /readyz, host:port; empty: none")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}

// teardownCheck refuses a teardown while the API server lists hotcell
// sandbox pods on node: their rules are what confines them. Without a
// cluster credential (run by hand on a node) it says it cannot look and
// lets the teardown go on, as the operator asked.
func (a *app) teardownCheck(ctx context.Context, kubeconfig, namespace, node string) error {
	rc, err := kubernetes.RESTConfig(kubeconfig)
	if err != nil {
		fmt.Fprintf(a.stderr, "no cluster credential, so not checking for sandbox pods left on node %s: %v\n", node, err)
		return nil
	}
	rc.UserAgent = "hotcell-egress-node"
	client, err := kubernetes.NewClient(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := kubeegress.PodsOnNode(ctx, client, namespace, node)
	if err != nil {
		return fmt.Errorf("--teardown: list the sandbox pods on node %s (their rules stay while they run): %w; --force removes the rules without looking", node, err)
	}
	if len(pods) > 0 {
		return fmt.Errorf("--teardown: %d sandbox pods still run on node %s in namespace %s (%s): their rules are what confines them; destroy or stop those sandboxes first, or add --force", len(pods), node, namespace, strings.Join(pods[:min(len(pods), 5)], ", "))
	}
	return nil
}

// resolvConfServers reads the nameservers of a resolv.conf as host:53.
func resolvConfServers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil && a.Is4() {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	return out, sc.Err()
}
