package wsdisk

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountLoop mounts the ext4 image img at mp through a loop device it sets
// up itself (LOOP_CTL_GET_FREE, LOOP_CONFIGURE, mount(2)) with the options
// of mountOptions: what mount(8) does for "-o loop", without a process.
// mount(8) took 26-154 ms here at a load average of 10 (its exec and
// libmount's work), the calls a few ms. The device is set to autoclear,
// as mount(8) sets it: it detaches when the filesystem is unmounted.
// ok is false, with no error, when this kernel has no LOOP_CONFIGURE
// (before 5.8) or no loop-control node: the caller uses mount(8).
func mountLoop(img, mp string) (ok bool, err error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, nil
	}
	defer ctl.Close()
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("open disk image: %w", err)
	}
	defer f.Close()
	// Another process (mount(8), losetup, another daemon) may take the
	// free device between the two calls: then the configure is EBUSY and
	// the next free one is tried.
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return true, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // no device nodes made for us (a container)
		}
		if err != nil {
			return true, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			lf.Close()
			continue
		}
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
			lf.Close()
			return false, nil // no LOOP_CONFIGURE
		}
		if err != nil {
			lf.Close()
			return true, fmt.Errorf("set up %s for %s: %w", dev, img, err)
		}
		err = unix.Mount(dev, mp, "ext4", unix.MS_NODEV|unix.MS_NOSUID, "discard,noinit_itable")
		// Closed either way: mounted, the filesystem holds the device;
		// not mounted, the last close detaches it (autoclear).
		lf.Close()
		if err != nil {
			return true, fmt.Errorf("mount %s (%s) at %s: %w", dev, img, mp, err)
		}
		return true, nil
	}
	return true, fmt.Errorf("set up a loop device for %s: every free one was taken first", img)
}
