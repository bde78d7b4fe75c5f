package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/hotcell/hotcell/client"
)

// These examples need a running daemon (hotcell serve), so they are
// compiled but not run by go test.

func Example() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Labels: map[string]string{"agent": "demo"},
		Limits: client.Limits{MemoryMB: 1024, CPUs: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)

	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hello from $(hostname)"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleClient_ExecStream() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.ExecStream(ctx, "SANDBOX_ID", client.ExecRequest{
		Argv:      []string{"make", "test"},
		Cwd:       "/workspace",
		TimeoutMs: 10 * 60 * 1000,
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output is written as it is produced, byte for byte.
	exit, err := s.CopyTo(os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code", exit.ExitCode)
}

func ExampleExecStream_Events() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.ExecStream(ctx, "SANDBOX_ID", client.ExecRequest{Command: "ls -l /"})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range s.Events() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %q\n", ev.Type, ev.Data)
	}
	exit, err := s.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code", exit.ExitCode)
}

func ExampleClient_WriteFile() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	// Any io.Reader works; the content is streamed, so a large file is
	// never held in memory.
	f, err := os.Open("dataset.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	res, err := c.WriteFile(ctx, "SANDBOX_ID", "data/dataset.csv", f, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", res.Size, "bytes to", res.Path)

	// A short one from a string.
	if _, err := c.WriteFile(ctx, "SANDBOX_ID", "run.sh", strings.NewReader("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_ReadFile() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, "SANDBOX_ID", "/etc/os-release", nil)
	if errors.Is(err, client.ErrNotFound) {
		fmt.Println("no such file")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	_, _ = os.Stdout.ReadFrom(rc)
}

func ExampleClient_ListSandboxes() {
	ctx := context.Background()
	c, err := client.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	sandboxes, err := c.ListSandboxes(ctx, client.ListOptions{
		State:  client.StateRunning,
		Labels: map[string]string{"agent": "demo"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range sandboxes {
		fmt.Println(sb.ID, sb.State, sb.Image)
	}
}
