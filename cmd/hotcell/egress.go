package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) egressCmd() *cobra.Command {
	var (
		asJSON bool
		mode   string
		allow  []string
	)
	cmd := &cobra.Command{
		Use:   "egress ID",
		Short: "Show or change where a sandbox may connect",
		Long: `Without flags, show a sandbox's egress policy, what its firewall dropped, the
DNS names it was refused and the addresses its allowlisted names resolved to.

With --mode or --allow, replace the policy of the running sandbox: open (the public
internet: not other sandboxes, the host's ports, broadcast, link-local, cloud
metadata or private ranges other than egress_allow_private), none (loopback
only) or allowlist (only the --allow entries: names, *.suffix wildcards, CIDRs,
each with an optional :port). The new policy is in force when the command returns.`,
		Example: `  hotcell egress sb-3f9a1c2b7d4e
  hotcell egress sb-3f9a1c2b7d4e --allow pypi.org:443 --allow '*.pythonhosted.org:443'
  hotcell egress sb-3f9a1c2b7d4e --mode none`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var st client.EgressStatus
			if cmd.Flags().Changed("mode") || cmd.Flags().Changed("allow") {
				st, err = c.SetEgress(cmd.Context(), args[0], client.EgressPolicy{Mode: mode, Allow: allow})
			} else {
				st, err = c.Egress(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			a.printEgress(st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	cmd.Flags().StringVar(&mode, "mode", "", "new mode: open, none or allowlist (default allowlist with --allow)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "allowed destination (repeat): example.com, *.example.com, 10.0.0.0/8, api.example.com:443")
	return cmd
}

func (a *app) printEgress(st client.EgressStatus) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	// Names come from the sandbox's own DNS queries.
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, termsafe.String(v)) }
	row("Mode", st.Policy.Mode)
	if len(st.Policy.Allow) > 0 {
		row("Allow", strings.Join(st.Policy.Allow, ", "))
	}
	if st.Address != "" {
		row("Address", st.Address)
	}
	row("Enforced", fmt.Sprint(st.Enforced))
	row("Dropped", fmt.Sprintf("%d packets, %d bytes", st.DroppedPackets, st.DroppedBytes))
	row("Refused DNS", fmt.Sprint(st.RefusedQueries))
	for _, r := range st.Resolved {
		port := ""
		if r.Port != 0 {
			port = fmt.Sprintf(":%d", r.Port)
		}
		row("Resolved", fmt.Sprintf("%s → %s%s until %s", r.Name, r.Address, port, r.ExpiresAt.Local().Format(time.TimeOnly)))
	}
	for _, d := range st.Denied {
		what := d.Name
		if d.Kind == client.EgressDenialConnect {
			what = fmt.Sprintf("%d packets dropped", d.Packets)
			if d.Address != "" {
				dst := d.Address
				if d.Port != 0 {
					dst = net.JoinHostPort(d.Address, strconv.Itoa(d.Port))
				}
				what = fmt.Sprintf("%s %s (%s), %d packets", d.Protocol, dst, d.Reason, d.Packets)
			}
		}
		row("Denied", fmt.Sprintf("%s %s %s", d.Time.Local().Format(time.TimeOnly), d.Kind, what))
	}
	tw.Flush()
}
