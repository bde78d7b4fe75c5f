package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

var _ driver.Statter = (*Driver)(nil)

// summary is the part of the kubelet's stats summary (/stats/summary) the
// driver reads.
type summary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			UID       string `json:"uid"`
		} `json:"podRef"`
		CPU *struct {
			Time                 time.Time `json:"time"`
			UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
		} `json:"cpu"`
		Memory *struct {
			WorkingSetBytes *uint64 `json:"workingSetBytes"`
		} `json:"memory"`
		Network *struct {
			Interfaces []struct {
				RxBytes *uint64 `json:"rxBytes"`
				TxBytes *uint64 `json:"txBytes"`
			} `json:"interfaces"`
		} `json:"network"`
		ProcessStats *struct {
			ProcessCount *uint64 `json:"process_count"`
		} `json:"process_stats"`
	} `json:"pods"`
}

// Stats reads the box's counters from its node's kubelet (the stats
// summary, through the API server's node proxy: the driver's credential
// needs nodes/proxy). The kubelet answers from its own periodic reading.
func (d *Driver) Stats(ctx context.Context, id string) (driver.Stats, error) {
	if err := checkID(id); err != nil {
		return driver.Stats{}, err
	}
	if _, err := d.record(ctx, id); err != nil {
		return driver.Stats{}, fmt.Errorf("stats of sandbox %s: %w", id, err)
	}
	p, err := d.getPod(ctx, id)
	if err != nil {
		return driver.Stats{}, err
	}
	if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
		return driver.Stats{}, fmt.Errorf("stats of sandbox %s: it is not running: %w", id, errdefs.ErrConflict)
	}
	raw, err := d.c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", p.Spec.NodeName, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return driver.Stats{}, classify("stats summary of node "+p.Spec.NodeName, err)
	}
	var sum summary
	if err := json.Unmarshal(raw, &sum); err != nil {
		return driver.Stats{}, fmt.Errorf("decode stats summary of node %s: %w", p.Spec.NodeName, err)
	}
	for _, ps := range sum.Pods {
		if ps.PodRef.UID != string(p.UID) || !read(ps.CPU == nil || ps.CPU.UsageCoreNanoSeconds == nil || *ps.CPU.UsageCoreNanoSeconds == 0,
			ps.Memory == nil || ps.Memory.WorkingSetBytes == nil || *ps.Memory.WorkingSetBytes == 0) {
			continue // not this pod, or one the kubelet lists before its first reading (all zero)
		}
		st := driver.Stats{Read: time.Now(), MemoryLimitBytes: memoryLimit(p)}
		if c := ps.CPU; c != nil && c.UsageCoreNanoSeconds != nil {
			st.Read = c.Time
			st.CPUUsageNs = *c.UsageCoreNanoSeconds
		} else {
			st.Unavailable = append(st.Unavailable, wire.StatCPUUsage)
		}
		if m := ps.Memory; m != nil && m.WorkingSetBytes != nil {
			st.MemoryBytes = int64(*m.WorkingSetBytes)
		} else {
			st.Unavailable = append(st.Unavailable, wire.StatMemoryUsage)
		}
		if n := ps.Network; n != nil {
			for _, i := range n.Interfaces {
				if i.RxBytes != nil {
					st.NetRxBytes += int64(*i.RxBytes)
				}
				if i.TxBytes != nil {
					st.NetTxBytes += int64(*i.TxBytes)
				}
			}
		} else {
			// The kubelet reads a pod's network through its runtime; some
			// (containerd 1.6 on cgroup v1, the test cluster) give none.
			st.Unavailable = append(st.Unavailable, wire.StatNetwork)
		}
		if pr := ps.ProcessStats; pr != nil && pr.ProcessCount != nil {
			st.Pids = int64(*pr.ProcessCount)
		} else {
			st.Unavailable = append(st.Unavailable, wire.StatPidsCurrent)
		}
		// A pod has no pids limit of its own (the kubelet's podPidsLimit
		// is the node's).
		st.Unavailable = append(st.Unavailable, wire.StatPidsLimit)
		return st, nil
	}
	// A pod the kubelet has not read yet (it reads every few seconds):
	// nothing to give but the limit.
	return driver.Stats{
		Read: time.Now(), MemoryLimitBytes: memoryLimit(p),
		Unavailable: []string{wire.StatCPUUsage, wire.StatMemoryUsage, wire.StatNetwork, wire.StatPidsCurrent, wire.StatPidsLimit},
	}, nil
}

// read reports whether a pod's entry in the summary is a reading: a pod
// whose agent runs has used CPU time and memory, so an entry with neither
// is one the kubelet listed before it read the pod's cgroups.
func read(noCPU, noMemory bool) bool { return !noCPU || !noMemory }

// memoryLimit is the box container's memory limit, 0 when it has none.
func memoryLimit(p *corev1.Pod) int64 {
	for _, c := range p.Spec.Containers {
		if c.Name == containerBox {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				return q.Value()
			}
		}
	}
	return 0
}
