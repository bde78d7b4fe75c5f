package leader

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotcell/hotcell/internal/testk8s"
)

// kubeClient is a new client of the test cluster; cut, when given, makes
// every request fail while it is set (the candidate's network to the API
// server is down).
func kubeClient(t *testing.T, kubeconfig string, cut *atomic.Bool) k8s.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	// Candidates renewing every 100 ms make 20 calls a second; client-go's
	// default of 5 would queue them past their deadlines.
	rc.QPS, rc.Burst = 100, 200
	if cut != nil {
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return cutTransport{rt, cut}
		}
	}
	c, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	return c
}

type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("test: the network to the API server is cut")
	}
	return c.rt.RoundTrip(r)
}

// kubeLeases gives eachStore a namespace of its own on the test cluster;
// each open is a new client in it.
func kubeLeases(t *testing.T) func() LeaseStore {
	k := testk8s.Cluster(t)
	ns := k.Namespace(t)
	return func() LeaseStore {
		return &KubeLeases{Client: kubeClient(t, k.Kubeconfig, nil), Namespace: ns, Prefix: "hotcell-"}
	}
}

// The Lease object says what a Kubernetes operator expects of one
// (client-go's leaderelection writes the same fields): who holds it, for
// how long in whole seconds, how often it changed hands; a release clears
// the holder and keeps the object.
func TestKubeLeaseObject(t *testing.T) {
	t.Parallel()
	k := testk8s.Cluster(t)
	ns := k.Namespace(t)
	c := kubeClient(t, k.Kubeconfig, nil)
	kl := &KubeLeases{Client: c, Namespace: ns, Prefix: "hotcell-"}
	ctx := t.Context()
	get := func() (holder string, secs, transitions int32) {
		t.Helper()
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, "hotcell-reaper", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get the Lease: %v", err)
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder, *l.Spec.LeaseDurationSeconds, *l.Spec.LeaseTransitions
	}
	now := time.Now()
	if ok, err := kl.AcquireLease(ctx, "reaper", "a", now, 2500*time.Millisecond); err != nil || !ok {
		t.Fatalf("a takes the free lease: %v, %v", ok, err)
	}
	if h, s, tr := get(); h != "a" || s != 3 || tr != 0 {
		t.Errorf("after a took it: holder %q, %d s, %d transitions; want a, 3 s (2.5 s rounded up), 0", h, s, tr)
	}
	if h, until, err := kl.LeaseHolder(ctx, "reaper"); err != nil || h != "a" || until.Sub(now).Round(time.Millisecond) != 3*time.Second {
		t.Errorf("LeaseHolder: %q until %v after the grant, %v; want a, 3s", h, until.Sub(now), err)
	}
	if ok, err := kl.AcquireLease(ctx, "reaper", "b", now.Add(2900*time.Millisecond), time.Second); err != nil || ok {
		t.Errorf("b before the rounded-up expiry: %v, %v; want false", ok, err)
	}
	if ok, err := kl.AcquireLease(ctx, "reaper", "b", now.Add(3*time.Second), time.Second); err != nil || !ok {
		t.Fatalf("b at the expiry: %v, %v; want true", ok, err)
	}
	if h, s, tr := get(); h != "b" || s != 1 || tr != 1 {
		t.Errorf("after b took it: holder %q, %d s, %d transitions; want b, 1 s, 1", h, s, tr)
	}
	if err := kl.ReleaseLease(ctx, "reaper", "a"); err != nil {
		t.Fatalf("a releasing what it lost: %v", err)
	}
	if h, _, _ := get(); h != "b" {
		t.Errorf("a's release changed b's Lease: holder %q", h)
	}
	if err := kl.ReleaseLease(ctx, "reaper", "b"); err != nil {
		t.Fatalf("b releases: %v", err)
	}
	if h, _, tr := get(); h != "" || tr != 1 {
		t.Errorf("after b released it: holder %q, %d transitions; want none, 1", h, tr)
	}
	if ok, err := kl.AcquireLease(ctx, "reaper", "c", now.Add(3*time.Second), time.Second); err != nil || !ok {
		t.Errorf("c takes the released lease before its renewal expired: %v, %v", ok, err)
	}
	if err := kl.ReleaseLease(ctx, "never-taken", "c"); err != nil {
		t.Errorf("releasing a Lease nobody made: %v", err)
	}
	bad := &KubeLeases{Client: c, Namespace: ns, Prefix: "Hotcell_"}
	if _, err := bad.AcquireLease(ctx, "reaper", "a", now, time.Second); err == nil {
		t.Error("a Lease name Kubernetes refuses (Hotcell_reaper) was not refused")
	}
}

// A leader cut off from the API server stops acting before its Lease can
// expire, so before another candidate (still connected) takes the role and
// acts: at no moment do two lead.
func TestKubeLeaderCutOffStepsDownBeforeAnotherLeads(t *testing.T) {
	t.Parallel()
	k := testk8s.Cluster(t)
	ns := k.Namespace(t)
	const ttl, renew = 3 * time.Second, 300 * time.Millisecond
	var cut atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type event struct {
		who  string
		lead bool
		at   time.Time
	}
	events := make(chan event, 16)
	run := func(name string, c k8s.Interface) chan struct{} {
		done := make(chan struct{})
		el := &StoreLease{Store: &KubeLeases{Client: c, Namespace: ns}, Name: "reconciler", Holder: name, TTL: ttl, Renew: renew}
		go func() {
			defer close(done)
			el.Run(ctx, func(ctx context.Context) {
				events <- event{name, true, time.Now()}
				<-ctx.Done()
				events <- event{name, false, time.Now()}
			})
		}()
		return done
	}
	next := func() event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(20 * time.Second):
			t.Fatal("no change of leadership within 20 s")
			return event{}
		}
	}
	aDone := run("a", kubeClient(t, k.Kubeconfig, &cut))
	if e := next(); e.who != "a" || !e.lead {
		t.Fatalf("first: %+v, want a leading", e)
	}
	bDone := run("b", kubeClient(t, k.Kubeconfig, nil))
	cut.Store(true)
	cutAt := time.Now()
	aStop := next()
	if aStop.who != "a" || aStop.lead {
		t.Fatalf("after a was cut off: %+v, want a stepping down", aStop)
	}
	bLead := next()
	if bLead.who != "b" || !bLead.lead {
		t.Fatalf("after a stepped down: %+v, want b leading", bLead)
	}
	t.Logf("a stepped down %v after the cut, b led %v after the cut", aStop.at.Sub(cutAt), bLead.at.Sub(cutAt))
	cancel()
	<-aDone
	<-bDone
}
