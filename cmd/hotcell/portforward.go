package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
)

func (a *app) portForwardCmd() *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward ID [LOCAL:]REMOTE [flags]",
		Short: "Forward a local port to a port inside a sandbox",
		Long: `Listen on a local port and tunnel every connection to a port inside the
sandbox (on its loopback), through the daemon: nothing needs to be published.
REMOTE alone listens on the same port number here; LOCAL 0 picks a free one.
Runs until interrupted (Ctrl-C).`,
		Example: `  hotcell port-forward sb-3f9a1c2b7d4e 8000
  hotcell port-forward sb-3f9a1c2b7d4e 9000:8000
  hotcell port-forward sb-3f9a1c2b7d4e 0:5432 --address 0.0.0.0`,
		Args: requireArgs(2, 2, "a sandbox ID and [LOCAL:]REMOTE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote, err := parsePortSpec(args[1])
			if err != nil {
				return usageError{err}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			// Fail now, with the daemon's answer, rather than on the first
			// connection: a wrong id or token is found before listening.
			if _, err := c.GetSandbox(cmd.Context(), args[0]); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
			if err != nil {
				return fmt.Errorf("port-forward: listen on %s: %w (choose another local port with LOCAL:%d)", net.JoinHostPort(address, strconv.Itoa(local)), err, remote)
			}
			fmt.Fprintf(a.stdout, "forwarding %s -> %s:%d\n", ln.Addr(), args[0], remote)
			err = a.forward(cmd.Context(), c, ln, args[0], remote)
			if cmd.Context().Err() != nil {
				return nil // Ctrl-C is how a forward ends
			}
			return err
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local `ADDRESS` to listen on")
	return cmd
}

// parsePortSpec reads [LOCAL:]REMOTE. LOCAL may be 0 (any free port);
// REMOTE may not.
func parsePortSpec(s string) (local, remote int, err error) {
	l, r, two := strings.Cut(s, ":")
	if !two {
		r = l
	}
	port := func(what, v string, zeroOK bool) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) || v != strconv.Itoa(n) {
			return 0, fmt.Errorf("port-forward %q: %s port %q is not a port number (1-65535)", s, what, v)
		}
		return n, nil
	}
	if remote, err = port("remote", r, false); err != nil {
		return 0, 0, err
	}
	if !two {
		return remote, remote, nil
	}
	if local, err = port("local", l, true); err != nil {
		return 0, 0, err
	}
	return local, remote, nil
}

// forward accepts on ln until ctx ends, tunnelling each connection to port
// in sandbox id. It waits for the open connections to close before it
// returns.
func (a *app) forward(ctx context.Context, c *client.Client, ln net.Listener, id string, port int) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("port-forward: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.tunnel(ctx, c, conn, id, port); err != nil {
				fmt.Fprintf(a.stderr, "hotcell: port-forward %s -> %s:%d: %s\n", conn.RemoteAddr(), id, port, a.describe(err))
			}
		}()
	}
}

// tunnel joins one local connection to a new tunnel, passing half-closes
// through both ways so that request/response protocols that shut down
// their sending side still get their answer.
func (a *app) tunnel(ctx context.Context, c *client.Client, conn net.Conn, id string, port int) error {
	defer conn.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pc, err := c.DialPort(dctx, id, port)
	cancel()
	if err != nil {
		return err
	}
	defer pc.Close()
	// Interrupting the CLI ends open connections too.
	stop := context.AfterFunc(ctx, func() {
		pc.Close()
		conn.Close()
	})
	defer stop()
	up := make(chan error, 1)
	go func() {
		_, err := io.Copy(pc, conn)
		if err == nil {
			err = pc.CloseWrite()
		}
		up <- err
	}()
	_, downErr := io.Copy(conn, pc)
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && downErr == nil {
		_ = cw.CloseWrite()
	}
	if downErr != nil {
		// The far end is gone: stop reading the local side too.
		conn.Close()
	}
	upErr := <-up
	if ctx.Err() != nil {
		return nil
	}
	if downErr != nil {
		return downErr
	}
	if upErr != nil && !errors.Is(upErr, net.ErrClosed) {
		return upErr
	}
	return nil
}
