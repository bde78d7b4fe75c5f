package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/gateway"
	"github.com/hotcell/hotcell/internal/wire"
)

// GatewayHook is what the manager needs from the LLM gateway
// (internal/gateway): tokens scoped to a sandbox, minted at create and
// revoked with it. Declared here, by its caller.
type GatewayHook interface {
	// Grant mints the sandbox's tokens for providers and returns the env
	// vars that carry them and the gateway's URLs into the box.
	Grant(ctx context.Context, id string, providers []string) (map[string]string, error)
	// Rotate replaces the sandbox's token for provider; the old one is
	// refused from then on.
	Rotate(ctx context.Context, id, provider string) (wire.GatewayCredential, error)
	// Revoke ends the sandbox's access to one provider.
	Revoke(ctx context.Context, id, provider string) error
	// Forget revokes every token of a destroyed sandbox.
	Forget(ctx context.Context, id string) error
}

// grantGateway mints the tokens of a new sandbox (its record must exist)
// and hands their env vars to its agent, which lays them over the box's
// env for every process (sendEnv, from the store, before the agent serves
// anything). They are not in the box's spec: the engine
// keeps a container's env in its config, and a snapshot or a saved
// template commits that config into an image, so a fork would start with
// the parent's live tokens. The record's env does not get them either, so
// the API never shows a token.
func (m *Manager) grantGateway(ctx context.Context, id string, providers []string) error {
	if len(providers) == 0 {
		return nil
	}
	if m.opts.Gateway == nil {
		return errdefs.Invalid("gateway", "the LLM gateway is not enabled on this daemon")
	}
	vars, err := m.opts.Gateway.Grant(ctx, id, providers)
	if err != nil {
		return fmt.Errorf("grant gateway access: %w", err)
	}
	return m.store.PutSandboxEnv(ctx, id, vars)
}

func (m *Manager) forgetGateway(ctx context.Context, id string) error {
	if m.opts.Gateway == nil {
		return nil
	}
	if err := m.opts.Gateway.Forget(ctx, id); err != nil {
		return fmt.Errorf("revoke gateway tokens: %w", err)
	}
	return nil
}

// RotateGateway replaces a sandbox's token for a provider. The box's env
// cannot change after it started, so the new token is returned and, when
// the sandbox runs, written to gateway.TokenDir/<provider>.token in it.
func (m *Manager) RotateGateway(ctx context.Context, id, provider string) (wire.GatewayCredential, error) {
	if m.opts.Gateway == nil {
		return wire.GatewayCredential{}, fmt.Errorf("llm gateway: %w", errdefs.ErrNotImplemented)
	}
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.GatewayCredential{}, err
	}
	defer unlock()
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return wire.GatewayCredential{}, err
	}
	cred, err := m.opts.Gateway.Rotate(ctx, id, provider)
	if err != nil {
		return cred, err
	}
	if sb.State != wire.StateRunning {
		return cred, nil
	}
	file := path.Join(gateway.TokenDir, provider+".token")
	if err := m.writeFile(ctx, id, file, []byte(cred.Token+"\n")); err != nil {
		// The rotation stands (the old token is dead); the caller has the
		// new one and learns that the file was not written.
		m.log.Warn("write rotated gateway token into the sandbox", "sandbox", id, "provider", provider, "err", err)
		return cred, nil
	}
	cred.TokenFile = file
	return cred, nil
}

// writeFile writes a small file in running sandbox id through its agent,
// mode 0600, making its directory (0700).
func (m *Manager) writeFile(ctx context.Context, id, file string, data []byte) error {
	m.mu.Lock()
	conn, ok := m.conns[id]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %s has no agent connection: %w", id, errdefs.ErrUnavailable)
	}
	private := wire.FileMode(0o700)
	if err := conn.DoJSON(ctx, http.MethodPost, "/v1/fs/mkdir", wire.MkdirRequest{Path: path.Dir(file), Parents: true, Mode: &private}, nil); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/files?"+url.Values{"path": {file}, "mode": {wire.FileMode(0o600).String()}}.Encode(), bytes.NewReader(data))
	if err != nil {
		return err
	}
	resp, err := conn.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errdefs.Read(resp)
	}
	return nil
}

// RevokeGateway removes a provider from a sandbox: its token stops working
// at once (the variable stays in the box's env, useless).
func (m *Manager) RevokeGateway(ctx context.Context, id, provider string) (wire.Sandbox, error) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return sb, err
	}
	i := slices.Index(sb.Gateway, provider)
	if i < 0 {
		return sb, fmt.Errorf("sandbox %s has no gateway access to provider %q: %w", id, provider, errdefs.ErrNotFound)
	}
	if m.opts.Gateway != nil {
		if err := m.opts.Gateway.Revoke(ctx, id, provider); err != nil {
			return sb, err
		}
	}
	sb.Gateway = slices.Delete(slices.Clone(sb.Gateway), i, i+1)
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return sb, fmt.Errorf("record sandbox %s: %w", id, err)
	}
	return m.withDeadlines(sb), nil
}
