package images

import (
	"archive/tar"
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/client"
)

// AgentRef is the image the Kubernetes driver's init container runs: it
// copies the agent binary into every box (driver/kubernetes).
const AgentRef = "hotcell/agent:latest"

// BuildAgent builds ref as an image of one file, the static agent binary
// at /hotcell-agent (its entrypoint), so a cluster without a registry can
// be given it with a plain image import. It takes a second.
func BuildAgent(ctx context.Context, c *client.Client, ref, agentBinary string) error {
	if err := checkStatic(agentBinary); err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return importTar(ctx, c, ref, []string{`ENTRYPOINT ["/hotcell-agent"]`}, func(w io.Writer) error {
		r := &rootfs{tw: tar.NewWriter(w)}
		if err := r.hostFile("hotcell-agent", 0o755, agentBinary); err != nil {
			return err
		}
		return r.tw.Close()
	})
}
