package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
)

func (a *app) statsCmd() *cobra.Command {
	var (
		stream, asJSON bool
		interval       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats ID [flags]",
		Short: "Show a sandbox's CPU, memory, processes, network and disk use",
		Long: `Show one sample of a running sandbox's resource use: CPU (100% is one core),
memory without the page cache, processes and threads, bytes received and sent,
and the size of /workspace. The CPU figure of a single sample is the average
since the daemon's previous sample of the sandbox (none the first time).

--stream samples every --interval until interrupted, redrawing the line on a
terminal; with --json it prints one JSON sample per line.`,
		Example: `  hotcell stats sb-3f9a1c2b7d4e
  hotcell stats sb-3f9a1c2b7d4e --stream --interval 2s
  hotcell stats sb-3f9a1c2b7d4e --json | jq .memory.usageBytes`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if !stream {
				s, err := c.Stats(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return a.printJSON(s)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 0, 3, ' ', 0)
				fmt.Fprintln(tw, statsHeader)
				fmt.Fprintln(tw, statsRow(s))
				return tw.Flush()
			}
			st, err := c.StatsStream(cmd.Context(), args[0], interval)
			if err != nil {
				return err
			}
			defer st.Close()
			redraw := isTTY(a.stdout)
			if !asJSON {
				fmt.Fprintln(a.stdout, padColumns(statsHeader))
			}
			for {
				s, err := st.Next()
				if err != nil {
					if cmd.Context().Err() != nil {
						if redraw {
							fmt.Fprintln(a.stdout)
						}
						return nil // interrupted: the normal end of a stream
					}
					if redraw {
						fmt.Fprintln(a.stdout)
					}
					return err
				}
				switch {
				case asJSON:
					if err := a.printJSONLine(s); err != nil {
						return err
					}
				case redraw:
					// Rewrite the one line in place, as top does.
					fmt.Fprintf(a.stdout, "\r\x1b[K%s", padColumns(statsRow(s)))
				default:
					fmt.Fprintln(a.stdout, padColumns(statsRow(s)))
				}
			}
		},
	}
	f := cmd.Flags()
	f.BoolVar(&stream, "stream", false, "keep sampling until interrupted")
	f.DurationVar(&interval, "interval", time.Second, "time between samples with --stream (100ms to 1m)")
	f.BoolVar(&asJSON, "json", false, "print JSON (one sample per line with --stream)")
	return cmd
}

const statsHeader = "ID\tCPU %\tMEM USAGE / LIMIT\tMEM %\tPIDS\tNET RX / TX\tDISK"

// statsWidths are fixed column widths for the streamed table: a tabwriter
// cannot align lines it has not seen yet.
var statsWidths = []int{16, 8, 22, 7, 10, 22, 10}

func padColumns(row string) string {
	cols := strings.Split(row, "\t")
	var b strings.Builder
	for i, c := range cols {
		if i == len(cols)-1 || i >= len(statsWidths) {
			b.WriteString(c)
			break
		}
		fmt.Fprintf(&b, "%-*s ", statsWidths[i], c)
	}
	return b.String()
}

func statsRow(s client.SandboxStats) string {
	cpu := "-"
	if s.CPU.WindowMs > 0 {
		cpu = fmt.Sprintf("%.1f%%", s.CPU.Percent)
	}
	memPct := "-"
	if s.Memory.LimitBytes > 0 {
		memPct = fmt.Sprintf("%.1f%%", 100*float64(s.Memory.UsageBytes)/float64(s.Memory.LimitBytes))
	}
	pids := fmt.Sprint(s.Pids.Current)
	if slices.Contains(s.Unavailable, "pids.current") {
		pids = "-" // the runtime cannot count them (gVisor)
	}
	if s.Pids.Limit > 0 {
		pids += fmt.Sprintf(" / %d", s.Pids.Limit)
	}
	disk := "-"
	if s.Disk != nil {
		disk = humanBytes(s.Disk.Bytes)
	}
	return strings.Join([]string{
		s.ID, cpu,
		humanBytes(s.Memory.UsageBytes) + " / " + humanBytes(s.Memory.LimitBytes), memPct,
		pids,
		humanBytes(s.Network.RxBytes) + " / " + humanBytes(s.Network.TxBytes),
		disk,
	}, "\t")
}

// humanBytes renders n the way docker stats does: 1.5MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
