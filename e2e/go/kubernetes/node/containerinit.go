package main

// The child half of a host-run container: `e2e-node container-init SPEC`,
// started by the runtime in a mount namespace of its own. It builds the
// container's root file system, chroots into it, takes the container's user
// and execs the container's command. Nothing it mounts is seen by the host.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// containerSpec is everything the child needs, written by the runtime.
type containerSpec struct {
	Rootfs  string   `json:"rootfs"`  // an empty directory; becomes the container's /
	Image   []string `json:"image"`   // host directories that make up the image, read-only
	Argv    []string `json:"argv"`    // command and args, as the kubelet expanded them
	Env     []string `json:"env"`     // KEY=VALUE
	WorkDir string   `json:"workDir"` // "" is /
	Mounts  []mount  `json:"mounts"`  // in the order given: a later one may sit inside an earlier one
	UID     *int64   `json:"uid,omitempty"`
	GID     *int64   `json:"gid,omitempty"`
	Groups  []int64  `json:"groups,omitempty"`
	// ReadOnlyRoot: nothing outside a mount is writable, as readOnlyRootFilesystem asks.
	ReadOnlyRoot bool  `json:"readOnlyRoot"`
	Capabilities []int `json:"capabilities"` // what the bounding set keeps
	NoNewPrivs   bool  `json:"noNewPrivs"`   // allowPrivilegeEscalation: false
}

type mount struct {
	Source   string `json:"source"` // host path
	Target   string `json:"target"` // container path
	ReadOnly bool   `json:"readOnly"`
}

// devices a process may expect in /dev: the rest of the host's /dev stays out.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func containerInit(specFile string) error {
	raw, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	var spec containerSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("%s: %w", specFile, err)
	}
	if len(spec.Argv) == 0 {
		return fmt.Errorf("%s: no command", specFile)
	}
	// Nothing below may propagate back to the host's mount table.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := buildRoot(&spec); err != nil {
		return err
	}
	if err := syscall.Chroot(spec.Rootfs); err != nil {
		return fmt.Errorf("chroot %s: %w", spec.Rootfs, err)
	}
	dir := spec.WorkDir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("working directory %s: %w", dir, err)
	}
	path, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return err
	}
	if err := limitCapabilities(spec.Capabilities, spec.NoNewPrivs); err != nil {
		return err
	}
	if err := becomeUser(&spec); err != nil {
		return err
	}
	return syscall.Exec(path, spec.Argv, spec.Env)
}

// buildRoot puts the image on a tmpfs root, each of its directories an overlay
// whose writes land in that tmpfs, then /dev, /proc and the container's mounts.
func buildRoot(spec *containerSpec) error {
	root := spec.Rootfs
	if err := syscall.Mount("rootfs", root, "tmpfs", 0, "mode=0755,size=64m"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", root, err)
	}
	upper := filepath.Join(root, ".overlay")
	for i, dir := range spec.Image {
		if err := mountImageDir(root, filepath.Join(upper, fmt.Sprint(i)), dir); err != nil {
			return err
		}
	}
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("dev", dev, "tmpfs", syscall.MS_NOSUID, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("tmpfs on /dev: %w", err)
	}
	for _, d := range devices {
		if err := bind("/dev/"+d, filepath.Join(dev, d), false); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dev, "shm"), 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777,size=16m"); err != nil {
		return fmt.Errorf("tmpfs on /dev/shm: %w", err)
	}
	proc := filepath.Join(root, "proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return err
	}
	if err := syscall.Mount("/proc", proc, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding /proc: %w", err)
	}
	tmp := filepath.Join(root, "tmp")
	if err := os.MkdirAll(tmp, 0o1777); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if err := bind(m.Source, filepath.Join(root, m.Target), m.ReadOnly); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.Source, m.Target, err)
		}
	}
	// An image directory a volume covers (a checkout under /tmp, where pods mount an
	// emptyDir) is laid over the volume again: the image's programs must stay reachable.
	for i, dir := range spec.Image {
		if !coveredByMount(dir, spec.Mounts) {
			continue
		}
		work := filepath.Join(upper, fmt.Sprint(len(spec.Image)+i))
		if err := mountImageDir(root, work, dir); err != nil {
			return err
		}
	}
	if spec.ReadOnlyRoot {
		// The root tmpfs read-only; its overlays with it (their upper directories live in it).
		if err := syscall.Mount("", root, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only root: %w", err)
		}
		for i, dir := range spec.Image {
			if _, err := os.Stat(filepath.Join(upper, fmt.Sprint(i))); err != nil {
				continue // a symlink, not an overlay
			}
			target := filepath.Join(root, dir)
			if err := syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("read-only %s: %w", dir, err)
			}
		}
	}
	return nil
}

// mountImageDir puts one host directory of the image at the same path under root: an
// overlay whose writes land in work (inside the root tmpfs), or the same symlink.
func mountImageDir(root, work, dir string) error {
	target := filepath.Join(root, dir)
	if info, err := os.Lstat(dir); err == nil && info.Mode()&os.ModeSymlink != 0 {
		link, err := os.Readlink(dir) // /bin -> usr/bin on a merged-/usr system
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		return os.Symlink(link, target)
	}
	for _, d := range []string{target, work + "/u", work + "/w"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/u,workdir=%s/w", dir, work, work)
	if err := syscall.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("image directory %s: %w", dir, err)
	}
	return nil
}

func coveredByMount(dir string, mounts []mount) bool {
	for _, m := range mounts {
		t := filepath.Clean(m.Target)
		if dir == t || strings.HasPrefix(dir, t+"/") {
			return true
		}
	}
	return false
}

// bind mounts source (a file or a directory) at target, creating target.
func bind(source, target string, readOnly bool) error {
	info, err := os.Stat(source)
	if err != nil {
		return err
	}
	if info.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else {
		if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
	}
	if err != nil {
		return err
	}
	if err := syscall.Mount(source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	if readOnly {
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY | syscall.MS_REC)
		return syscall.Mount("", target, "", flags, "")
	}
	return nil
}

// lookPath resolves a bare command on the container's PATH, inside the new root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			_ = os.Setenv("PATH", kv[len("PATH="):])
		}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("executable %q not found in $PATH: %w", name, err)
	}
	return path, nil
}

func becomeUser(spec *containerSpec) error {
	groups := make([]int, 0, len(spec.Groups))
	for _, g := range spec.Groups {
		groups = append(groups, int(g))
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if spec.GID != nil {
		if err := syscall.Setgid(int(*spec.GID)); err != nil {
			return fmt.Errorf("setgid %d: %w", *spec.GID, err)
		}
	}
	if spec.UID != nil {
		if err := syscall.Setuid(int(*spec.UID)); err != nil {
			return fmt.Errorf("setuid %d: %w", *spec.UID, err)
		}
	}
	return nil
}
