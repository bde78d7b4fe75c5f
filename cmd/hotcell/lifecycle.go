package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) pauseCmd() *cobra.Command {
	return a.lifecycleCmd("pause", "Freeze a running sandbox, keeping its memory",
		`Freeze every process of a running sandbox where it is. Its memory is kept; 'hotcell resume' lets it go on. Exec and file calls answer 409 while it is paused.`,
		(*client.Client).PauseSandbox)
}

func (a *app) resumeCmd() *cobra.Command {
	return a.lifecycleCmd("resume", "Resume a paused sandbox",
		`Thaw a paused sandbox: its processes go on from where they were.`,
		(*client.Client).ResumeSandbox)
}

func (a *app) timeoutsCmd() *cobra.Command {
	var (
		idle, lifetime, extend     time.Duration
		idleAction, lifetimeAction string
		asJSON                     bool
	)
	cmd := &cobra.Command{
		Use:   "timeouts ID",
		Short: "Show, change or extend a sandbox's idle timeout and lifetime",
		Long: `Without flags, show a sandbox's timeouts and deadlines. With flags, change them:
--idle and --lifetime set the durations (0 turns one off; the lifetime counts
from creation), --idle-action and --lifetime-action choose stop, pause or
destroy, and --extend moves the lifetime deadline later.`,
		Example: `  hotcell timeouts sb-3f9a1c2b7d4e
  hotcell timeouts sb-3f9a1c2b7d4e --idle 10m --idle-action pause
  hotcell timeouts sb-3f9a1c2b7d4e --extend 1h`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var req client.SetTimeoutsRequest
			secs := func(name string, d time.Duration) (*int64, error) {
				if !cmd.Flags().Changed(name) {
					return nil, nil
				}
				if d < 0 {
					return nil, usagef("--%s must not be negative", name)
				}
				v := int64((d + time.Second - 1) / time.Second)
				return &v, nil
			}
			if req.IdleSeconds, err = secs("idle", idle); err != nil {
				return err
			}
			if req.MaxLifetimeSeconds, err = secs("lifetime", lifetime); err != nil {
				return err
			}
			if req.ExtendSeconds, err = secs("extend", extend); err != nil {
				return err
			}
			if cmd.Flags().Changed("idle-action") {
				req.IdleAction = &idleAction
			}
			if cmd.Flags().Changed("lifetime-action") {
				req.LifetimeAction = &lifetimeAction
			}
			var sb client.Sandbox
			if req == (client.SetTimeoutsRequest{}) {
				sb, err = c.GetSandbox(cmd.Context(), args[0])
			} else {
				sb, err = c.SetTimeouts(cmd.Context(), args[0], req)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(sb.Timeouts)
			}
			t := sb.Timeouts
			if t == nil {
				fmt.Fprintln(a.stdout, "no timeouts")
				return nil
			}
			show := func(name string, secs int64, action string, at *time.Time) {
				if secs == 0 {
					fmt.Fprintf(a.stdout, "%-9s off\n", name)
					return
				}
				line := fmt.Sprintf("%-9s %s, then %s", name, time.Duration(secs)*time.Second, action)
				if at != nil {
					line += fmt.Sprintf(" at %s (in %s)", at.Local().Format(time.DateTime), time.Until(*at).Round(time.Second))
				}
				fmt.Fprintln(a.stdout, line)
			}
			show("idle:", t.IdleSeconds, t.IdleAction, t.IdleDeadline)
			show("lifetime:", t.MaxLifetimeSeconds, t.LifetimeAction, t.ExpiresAt)
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&idle, "idle", 0, "idle timeout (0: off)")
	f.StringVar(&idleAction, "idle-action", "", "what the idle timeout does: stop, pause or destroy")
	f.DurationVar(&lifetime, "lifetime", 0, "maximum lifetime from creation (0: off)")
	f.StringVar(&lifetimeAction, "lifetime-action", "", "what the lifetime does: stop, pause or destroy")
	f.DurationVar(&extend, "extend", 0, "move the lifetime deadline this much later")
	f.BoolVar(&asJSON, "json", false, "print the timeouts as JSON")
	return cmd
}

func (a *app) eventsCmd() *cobra.Command {
	var (
		follow, asJSON bool
		since          int64
	)
	cmd := &cobra.Command{
		Use:   "events [ID]",
		Short: "Show the event log of a sandbox, or of all",
		Long: `Show a sandbox's lifecycle events (created, setup, started, stopped, paused,
resumed, oom-killed, timed-out, error, recovered, destroyed, ...), or every
sandbox's without an ID. --follow keeps printing new events until the
sandbox is destroyed (or, for all, until interrupted).`,
		Example: `  hotcell events sb-3f9a1c2b7d4e
  hotcell events --follow`,
		Args: requireArgs(0, 1, "at most one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			opts := client.EventsOptions{Since: since}
			print := func(ev client.SandboxEvent) error {
				if asJSON {
					return a.printJSON(ev)
				}
				line := fmt.Sprintf("%s  %-6d %s  %-16s %s", ev.Time.Local().Format("2006-01-02 15:04:05.000"), ev.Seq, ev.SandboxID, ev.Type, ev.Message)
				if len(ev.Fields) > 0 {
					keys := make([]string, 0, len(ev.Fields))
					for k := range ev.Fields {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					var kv []string
					for _, k := range keys {
						kv = append(kv, k+"="+ev.Fields[k])
					}
					line += "  " + strings.Join(kv, " ")
				}
				_, err := fmt.Fprintln(a.stdout, termsafe.String(strings.TrimRight(line, " ")))
				return err
			}
			if !follow {
				var evs []client.SandboxEvent
				if len(args) == 1 {
					evs, err = c.SandboxEvents(cmd.Context(), args[0], opts)
				} else {
					evs, err = c.HostEvents(cmd.Context(), opts)
				}
				if err != nil {
					return err
				}
				for _, ev := range evs {
					if err := print(ev); err != nil {
						return err
					}
				}
				return nil
			}
			var st *client.EventStream
			if len(args) == 1 {
				st, err = c.FollowSandboxEvents(cmd.Context(), args[0], opts)
			} else {
				st, err = c.FollowHostEvents(cmd.Context(), opts)
			}
			if err != nil {
				return err
			}
			defer st.Close()
			for {
				ev, err := st.Next()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := print(ev); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().Int64Var(&since, "since", 0, "only events after this seq")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print events as JSON")
	return cmd
}
