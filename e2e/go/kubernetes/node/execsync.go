package main

// Exec probes (and ExecSync) in a host-run container: the command runs in its mount
// namespace, root and user, through nsenter.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// execSync runs cmd inside a running host-run container (its mount namespace,
// root and user), as an exec probe or `kubectl exec` would: ok false when the
// container is not one of ours.
func (h *hostExec) execSync(ctx context.Context, id string, argv []string, timeout time.Duration) (stdout, stderr []byte, code int32, ok bool, err error) {
	h.mu.Lock()
	p := h.procs[id]
	h.mu.Unlock()
	if p == nil {
		return nil, nil, 0, false, nil
	}
	select {
	case <-p.done:
		return nil, nil, 0, true, fmt.Errorf("container %s is not running", id)
	default:
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	pid := fmt.Sprint(p.cmd.Process.Pid)
	uid, gid, err := credentials(pid)
	if err != nil {
		return nil, nil, 0, true, err
	}
	// --root and --wd: the container's chroot; -S/-G: its user and group.
	args := append([]string{"--target", pid, "--mount", "--root", "--wd", "-S", uid, "-G", gid, "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run()
	if ee, isExit := runErr.(*exec.ExitError); isExit {
		return []byte(out.String()), []byte(errOut.String()), int32(ee.ExitCode()), true, nil
	}
	return []byte(out.String()), []byte(errOut.String()), 0, true, runErr
}

// credentials are the real uid and gid of a process, from /proc.
func credentials(pid string) (uid, gid string, err error) {
	raw, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "Uid:" {
			uid = f[1]
		} else if len(f) >= 2 && f[0] == "Gid:" {
			gid = f[1]
		}
	}
	if uid == "" || gid == "" {
		return "", "", fmt.Errorf("no Uid/Gid in /proc/%s/status", pid)
	}
	return uid, gid, nil
}
