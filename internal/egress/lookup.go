package egress

import "net/netip"

// SandboxAt returns the sandbox whose box has addr on the egress network.
// The LLM gateway uses it to check that a token comes from its own sandbox.
func (c *Controller) SandboxAt(addr netip.Addr) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.byAddr[addr]
	if !ok {
		return "", false
	}
	return st.id, true
}

// Subnet is the egress network's address range.
func (c *Controller) Subnet() netip.Prefix { return c.cfg.Subnet }
