package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// The identity of a set of daemons on one PostgreSQL store: the instance
// id (the label of the boxes the set owns) and the TCP agent channel's
// material (the certificate every agent pins, the key of the sandboxes'
// credentials) are store settings, so that every daemon of the set
// re-adopts the same boxes and an agent that redials any of them finds
// the certificate it pinned and its credential valid. On a SQLite store
// both stay in the data dir, as they always were.
//
// The rule: the store's value, once set, wins. A daemon that finds none
// in the store uploads its data dir's (a daemon alone on the store before
// the set grew keeps the boxes it made with it), or a new one if its
// data dir has none; of daemons starting at once, the first to commit
// sets it (store.InitSetting) and the others use it; a data dir without
// an instance id gets a copy of the store's (the channel's key material
// stays in the store alone). A daemon whose data
// dir holds another value logs it and uses the store's: its boxes
// labelled with the old id, and its agents pinned to the old certificate,
// are then another instance's, left alone (not removed) as they are when
// a daemon is pointed at a new store.
//
// The set's secrets go the same way: the API token (so a client, and the
// CLI on any daemon's host, may call any daemon of the set with one
// token, which forwarding passes on) and the E2B envd tokens' secret (so
// an envd token minted by one daemon is good at another, which holds the
// sandbox's agent once its first daemon died). Each is kept in the data
// dir's file too, which the CLI and E2B's tokens read as before.
const (
	settingInstance     = "instance"
	settingAgentChannel = "agent-channel"
	settingAPIToken     = "api-token"
	settingE2BSecret    = "e2b-secret"
)

// setSecret returns the secret the daemons of a PostgreSQL store share
// under name, kept in the data dir's file at path as well. local is that
// file's (EnsureToken's); fresh says this start just made it. The store's
// wins once set; a daemon that finds none uploads its own. A daemon whose
// own secret was in use (not fresh) and is not the set's is told so: its
// clients must take the set's, which its file now holds.
func setSecret(ctx context.Context, st *store.Store, name, path, local string, fresh bool, log *slog.Logger) (string, error) {
	stored, err := st.InitSetting(ctx, name, local)
	if err != nil {
		return "", fmt.Errorf("%s of the store: %w", name, err)
	}
	if stored == local {
		return stored, nil
	}
	if err := config.WriteToken(path, stored); err != nil {
		return "", fmt.Errorf("%s of the store: %w", name, err)
	}
	if !fresh {
		log.Warn("this daemon's "+name+" is not the one of the daemons sharing its store: the store's is used and now in the file; clients holding the old one must take the new", "path", path)
	}
	return stored, nil
}

// e2bSecret is the key E2B's envd access tokens derive from: the data
// dir's, or on PostgreSQL the store's.
func e2bSecret(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger) (string, error) {
	path := filepath.Join(cfg.DataDir, "e2b-secret")
	secret, created, err := config.EnsureToken(path)
	if err != nil {
		return "", fmt.Errorf("e2b secret: %w", err)
	}
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return secret, nil
	}
	return setSecret(ctx, st, settingE2BSecret, path, secret, created, log)
}

// agentChannelDir is where a daemon on SQLite keeps the channel material.
func agentChannelDir(cfg config.Config) string { return filepath.Join(cfg.DataDir, "agent-channel") }

// setInstance returns the instance id of the daemons sharing cfg's
// PostgreSQL store, "" on SQLite (the manager reads the data dir's).
func setInstance(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger) (string, error) {
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return "", nil
	}
	local, err := sandbox.ReadInstance(cfg.DataDir)
	if err != nil {
		return "", err
	}
	offer := local
	if offer == "" {
		offer = sandbox.NewInstance()
	}
	id, err := st.InitSetting(ctx, settingInstance, offer)
	if err != nil {
		return "", fmt.Errorf("instance id of the store: %w", err)
	}
	if !sandbox.ValidInstance(id) {
		return "", fmt.Errorf("instance id of the store: %q is not 16-64 hex digits", id)
	}
	if local == "" {
		// A copy of the label this daemon's boxes carry, for an operator
		// (and the tests) to find them by; the store's stays the one used.
		if err := sandbox.WriteInstance(cfg.DataDir, id); err != nil {
			return "", err
		}
	}
	switch {
	case local != "" && local != id:
		log.Warn("this data dir's instance id is not the store's: the store's is used, and boxes labelled with the data dir's are another instance's, left alone",
			"store_instance", id, "data_dir_instance", local)
	case local == id:
		log.Info("instance id of the store", "instance", id)
	case offer == id:
		log.Info("made the store's instance id", "instance", id)
	default:
		log.Info("instance id of the store, set by another daemon", "instance", id)
	}
	return id, nil
}

// agentMaterial is the TCP agent channel's material: on SQLite the data
// dir's (made there the first time, 0600); on PostgreSQL the store's.
func agentMaterial(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger) (*agentauth.Material, error) {
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return agentauth.LoadOrCreate(agentChannelDir(cfg))
	}
	local, err := agentauth.Load(agentChannelDir(cfg))
	if err != nil {
		return nil, err
	}
	offer := local
	if offer == nil {
		if offer, err = agentauth.New(); err != nil {
			return nil, err
		}
	}
	bundle, err := st.InitSetting(ctx, settingAgentChannel, string(offer.MarshalPEM()))
	if err != nil {
		return nil, fmt.Errorf("agent channel material of the store: %w", err)
	}
	m, err := agentauth.ParseMaterial([]byte(bundle))
	if err != nil {
		return nil, fmt.Errorf("agent channel material of the store: %w", err)
	}
	if local != nil && !local.Equal(m) {
		log.Warn("this data dir's agent channel material is not the store's: the store's is used, and agents of boxes made with the data dir's (pinned to its certificate) cannot reach this daemon",
			"dir", agentChannelDir(cfg))
	}
	return m, nil
}
