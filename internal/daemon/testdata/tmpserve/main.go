package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/daemon"
	"github.com/spf13/pflag"
)

func main() {
	fs := pflag.NewFlagSet("serve", pflag.ExitOnError)
	config.AddFlags(fs)
	fs.Parse(os.Args[1:])
	cfg, err := config.Load(fs, os.Getenv)
	if err != nil {
		panic(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := daemon.Run(ctx, cfg, log); err != nil {
		panic(err)
	}
}
