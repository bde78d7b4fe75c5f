package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// SetPortPublic records whether the preview of port needs a token. The
// record outlives daemon restarts; the preview proxy reads it per request.
func (m *Manager) SetPortPublic(ctx context.Context, id string, port int, public bool) (wire.Sandbox, error) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return sb, err
	}
	ports := slices.DeleteFunc(slices.Clone(sb.PublicPorts), func(p int) bool { return p == port })
	if public {
		ports = append(ports, port)
		slices.Sort(ports)
	}
	if slices.Equal(ports, sb.PublicPorts) {
		return sb, nil
	}
	sb.PublicPorts = ports
	if len(ports) == 0 {
		sb.PublicPorts = nil
	}
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return sb, fmt.Errorf("record public ports of sandbox %s: %w", id, err)
	}
	return sb, nil
}
