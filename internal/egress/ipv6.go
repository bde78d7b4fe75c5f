package egress

import (
	"fmt"
	"os"
	"strings"
)

// The egress network has no IPv6 (the driver makes it so and checks it),
// but a box still gets a link-local IPv6 address when the host kernel has
// IPv6, and so does the bridge: the host's services on [::] would answer a
// sandbox there, around every IPv4 rule. Two ip6tables rules close it: all
// IPv6 in from the bridge is dropped, to the host (INPUT) and through it
// (FORWARD).

// v6Chains are the ip6tables chains the guard sits at the top of.
var v6Chains = []string{"INPUT", "FORWARD"}

// v6Guard is the ip6tables side of one egress network.
type v6Guard struct {
	ipt    iptablesAPI
	bridge string
	tag    string // in the rules' comment: finds them without the bridge
}

func newV6Guard(ipt iptablesAPI, bridge, base string) *v6Guard {
	return &v6Guard{ipt: ipt, bridge: bridge, tag: base + " ipv6"}
}

func (g *v6Guard) rule() []string {
	return []string{"-i", g.bridge, "-m", "comment", "--comment", commentPrefix + g.tag, "-j", "DROP"}
}

// ensure puts the drops first in INPUT and FORWARD unless they are there.
func (g *v6Guard) ensure() error {
	for _, c := range v6Chains {
		ok, err := g.ipt.Exists(table, c, g.rule()...)
		if err != nil {
			return fmt.Errorf("check ip6tables %s: %w", c, err)
		}
		if !ok {
			if err := g.ipt.Insert(table, c, 1, g.rule()...); err != nil {
				return fmt.Errorf("drop IPv6 from %s in ip6tables %s: %w", g.bridge, c, err)
			}
		}
	}
	return nil
}

// ok reports whether both drops are in place.
func (g *v6Guard) ok() bool {
	for _, c := range v6Chains {
		if ok, err := g.ipt.Exists(table, c, g.rule()...); err != nil || !ok {
			return false
		}
	}
	return true
}

// removeV6Guard deletes the drops tagged for base, whatever bridge they
// name (Teardown knows the network, not its bridge).
func removeV6Guard(ipt iptablesAPI, base string) error {
	tag := base + " ipv6"
	for _, c := range v6Chains {
		lines, err := ipt.List(table, c)
		if err != nil {
			return fmt.Errorf("list ip6tables %s: %w", c, err)
		}
		for _, l := range lines {
			if !strings.Contains(l, tag) {
				continue
			}
			fs := strings.Fields(l)
			for i := 0; i+1 < len(fs); i++ {
				if fs[i] == "-i" {
					g := &v6Guard{ipt: ipt, bridge: fs[i+1], tag: tag}
					if err := ipt.DeleteIfExists(table, c, g.rule()...); err != nil {
						return fmt.Errorf("delete ip6tables rule of %s: %w", base, err)
					}
				}
			}
		}
	}
	return nil
}

// hostHasIPv6 says whether the kernel has IPv6 at all; without it there is
// nothing to guard (and no ip6tables to guard it with).
func hostHasIPv6() bool {
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}
