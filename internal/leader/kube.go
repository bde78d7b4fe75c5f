package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	k8s "k8s.io/client-go/kubernetes"
)

// KubeLeases is a LeaseStore on coordination.k8s.io/v1 Lease objects, so
// that candidates that share a Kubernetes cluster (daemons serving one
// store from pods of a Deployment) elect through the API server:
//
//	el := &StoreLease{Store: &KubeLeases{Client: c, Namespace: "hotcell"}, Name: "reconciler", Holder: id}
//
// Each role is one Lease, named Prefix+name, with the fields client-go's
// leaderelection writes (holderIdentity, leaseDurationSeconds, acquireTime,
// renewTime, leaseTransitions), so `kubectl get lease` shows who leads. A
// write is an update on the resourceVersion it read: of two candidates that
// read the same free Lease, the API server lets one write it and answers
// the other 409 Conflict, which is "not yours".
//
// As with the store's leases, expiry is renewTime+leaseDurationSeconds by
// the callers' clocks, which must agree to well within the renewal period.
// A Lease's duration is whole seconds: a ttl that is not is rounded up
// (others wait longer before taking the role, never shorter).
//
// The credential needs get, create and update on leases in Namespace.
type KubeLeases struct {
	Client    k8s.Interface
	Namespace string
	// Prefix goes before each role's name ("hotcell-" makes the
	// reconciler's Lease hotcell-reconciler).
	Prefix string
}

var _ LeaseStore = (*KubeLeases)(nil)

// conflictRetries is how often a write that lost to another is read and
// decided again: a Conflict may come from a writer that did not change the
// holder (an annotation), which should not cost the holder its role.
const conflictRetries = 3

func (k *KubeLeases) objectName(name string) (string, error) {
	n := k.Prefix + name
	if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
		return "", fmt.Errorf("lease name %q: %s", n, strings.Join(errs, "; "))
	}
	return n, nil
}

// leaseSeconds is ttl in whole seconds, rounded up.
func leaseSeconds(ttl time.Duration) int32 {
	s := (ttl + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	return int32(s)
}

// AcquireLease implements LeaseStore: it takes the Lease for holder until
// now+ttl (rounded up to whole seconds), or renews it when holder has it.
// It reports false, changing nothing, while another holder's Lease has not
// expired at now, and when another candidate wrote the Lease first.
func (k *KubeLeases) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, errors.New("acquire lease: name and holder must not be empty, ttl must be positive")
	}
	obj, err := k.objectName(name)
	if err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	secs := leaseSeconds(ttl)
	renew := metav1.NewMicroTime(now)
	for range conflictRetries {
		cur, err := leases.Get(ctx, obj, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err := leases.Create(ctx, &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: obj, Namespace: k.Namespace},
				Spec: coordv1.LeaseSpec{
					HolderIdentity:       &holder,
					LeaseDurationSeconds: &secs,
					AcquireTime:          &renew,
					RenewTime:            &renew,
					LeaseTransitions:     new(int32),
				},
			}, metav1.CreateOptions{})
			switch {
			case err == nil:
				return true, nil
			case apierrors.IsAlreadyExists(err):
				continue // another created it first: read what it wrote
			default:
				return false, fmt.Errorf("acquire lease %s/%s: %w", k.Namespace, obj, err)
			}
		}
		if err != nil {
			return false, fmt.Errorf("acquire lease %s/%s: %w", k.Namespace, obj, err)
		}
		next := cur.DeepCopy()
		s := &next.Spec
		current := ""
		if s.HolderIdentity != nil {
			current = *s.HolderIdentity
		}
		switch {
		case current == holder:
		case current == "" || expired(s, now):
			s.HolderIdentity = &holder
			s.AcquireTime = &renew
			t := int32(0)
			if s.LeaseTransitions != nil {
				t = *s.LeaseTransitions
			}
			if current != "" {
				t++
			}
			s.LeaseTransitions = &t
		default:
			return false, nil
		}
		s.LeaseDurationSeconds = &secs
		s.RenewTime = &renew
		_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsConflict(err):
			continue // written since we read it: decide again on what is there now
		default:
			return false, fmt.Errorf("acquire lease %s/%s: %w", k.Namespace, obj, err)
		}
	}
	// Lost every race: others are writing it, so it is not ours now.
	return false, nil
}

// expired reports whether a Lease's holder has let it lapse at now. A
// Lease without a renewal time or duration has no holder to wait for.
func expired(s *coordv1.LeaseSpec, now time.Time) bool {
	if s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return true
	}
	return !now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// ReleaseLease implements LeaseStore: it clears holder's name from the
// Lease, so that another may take it at once; a Lease holder does not have
// (or that does not exist) is left alone. The object stays, with its
// transition count.
func (k *KubeLeases) ReleaseLease(ctx context.Context, name, holder string) error {
	obj, err := k.objectName(name)
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	leases := k.Client.CoordinationV1().Leases(k.Namespace)
	for range conflictRetries {
		cur, err := leases.Get(ctx, obj, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release lease %s/%s: %w", k.Namespace, obj, err)
		}
		if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != holder {
			return nil
		}
		next := cur.DeepCopy()
		next.Spec.HolderIdentity = nil
		next.Spec.AcquireTime = nil
		_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue
		default:
			return fmt.Errorf("release lease %s/%s: %w", k.Namespace, obj, err)
		}
	}
	return fmt.Errorf("release lease %s/%s: it kept changing under the release", k.Namespace, obj)
}

// LeaseHolder returns who holds the Lease name and until when (its renewal
// plus its duration); "" when nobody took it or it was released. An
// expired Lease is returned as it is: compare its expiry with the time.
func (k *KubeLeases) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	obj, err := k.objectName(name)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read lease: %w", err)
	}
	cur, err := k.Client.CoordinationV1().Leases(k.Namespace).Get(ctx, obj, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read lease %s/%s: %w", k.Namespace, obj, err)
	}
	s := cur.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		return "", time.Time{}, nil
	}
	var until time.Time
	if s.RenewTime != nil && s.LeaseDurationSeconds != nil {
		until = s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	}
	return *s.HolderIdentity, until, nil
}
