package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/driver"
)

// ensureWorkspace makes sure sandbox id's workspace claim exists (and,
// with WorkspaceHostDir, the volume bound to it). created reports whether
// this call made the claim: only then may a failed Create remove it,
// because an existing claim can hold a workspace someone still wants.
func (d *Driver) ensureWorkspace(ctx context.Context, spec driver.Spec) (created bool, err error) {
	claims := d.c.CoreV1().PersistentVolumeClaims(d.cfg.Namespace)
	name := ClaimName(spec.ID)
	_, err = claims.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return false, nil
	case !isNotFound(err):
		return false, classify("get claim "+name, err)
	}
	size := d.cfg.WorkspaceSize
	if spec.Limits.DiskMB > 0 {
		size = spec.Limits.DiskMB << 20
	}
	qty := *resource.NewQuantity(size, resource.BinarySI)
	labels := managedLabels(spec.ID, spec.Instance)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.cfg.Namespace, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: qty}},
		},
	}
	if d.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = &d.cfg.StorageClass
	}
	if d.cfg.WorkspaceHostDir != "" {
		class := d.cfg.StorageClass // "" binds to a volume of no class, never a default one
		pvc.Spec.StorageClassName = &class
		pvc.Spec.VolumeName = d.volumeName(spec.ID)
		dirType := corev1.HostPathDirectoryOrCreate
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: d.volumeName(spec.ID), Labels: cloneLabels(labels)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: qty},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain, // Destroy removes the directory
				StorageClassName:              class,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: d.cfg.Namespace, Name: name},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: d.hostDir(spec.ID), Type: &dirType},
				},
			},
		}
		if _, err := d.c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
			return false, classify("create volume "+pv.Name, err)
		}
	}
	if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		if d.cfg.WorkspaceHostDir != "" {
			_ = d.c.CoreV1().PersistentVolumes().Delete(context.WithoutCancel(ctx), d.volumeName(spec.ID), metav1.DeleteOptions{})
		}
		return false, classify("create claim "+name, err)
	}
	return true, nil
}

// hostDir is where WorkspaceHostDir keeps sandbox id's workspace on the
// node.
func (d *Driver) hostDir(id string) string {
	return filepath.Join(d.cfg.WorkspaceHostDir, d.cfg.Namespace+"-"+id)
}

// removeWorkspace removes sandbox id's claim and, with WorkspaceHostDir,
// its volume and directory; what is missing is not an error. The pod must
// be gone.
func (d *Driver) removeWorkspace(ctx context.Context, id string) error {
	err := d.c.CoreV1().PersistentVolumeClaims(d.cfg.Namespace).Delete(ctx, ClaimName(id), metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		return classify("remove claim "+ClaimName(id), err)
	}
	if d.cfg.WorkspaceHostDir == "" {
		return nil
	}
	err = d.c.CoreV1().PersistentVolumes().Delete(ctx, d.volumeName(id), metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		return classify("remove volume "+d.volumeName(id), err)
	}
	if err := os.RemoveAll(d.hostDir(id)); err != nil {
		return fmt.Errorf("remove workspace directory of sandbox %s: %w", id, err)
	}
	return nil
}
