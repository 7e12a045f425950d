package main

// Capabilities of a host-run container, as a runtime (runc) sets them: its default set,
// less what the container drops, plus what it adds. Only a root container keeps any: a
// change of uid clears them, and exec gives root what the bounding set allows.

import (
	"fmt"
	"strings"
	"syscall"
)

// Linux capability numbers, by name without the CAP_ prefix.
var capabilityNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
	"SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN",
	"NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE",
	"SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
	"PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// runc's default set for a container.
var defaultCapabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}

func capabilityNumber(name string) (int, error) {
	name = strings.TrimPrefix(strings.ToUpper(name), "CAP_")
	for i, n := range capabilityNames {
		if n == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown capability %q", name)
}

// keptCapabilities is the container's set: every capability when privileged, else the
// default set less drop plus add ("ALL" in either means all of them).
func keptCapabilities(privileged bool, add, drop []string) ([]int, error) {
	kept := map[int]bool{}
	if privileged {
		for i := range capabilityNames {
			kept[i] = true
		}
	} else {
		for _, n := range defaultCapabilities {
			c, _ := capabilityNumber(n)
			kept[c] = true
		}
	}
	for _, n := range drop {
		if strings.EqualFold(n, "ALL") {
			kept = map[int]bool{}
			continue
		}
		c, err := capabilityNumber(n)
		if err != nil {
			return nil, err
		}
		delete(kept, c)
	}
	for _, n := range add {
		if strings.EqualFold(n, "ALL") {
			for i := range capabilityNames {
				kept[i] = true
			}
			continue
		}
		c, err := capabilityNumber(n)
		if err != nil {
			return nil, err
		}
		kept[c] = true
	}
	out := []int{}
	for i := range capabilityNames {
		if kept[i] {
			out = append(out, i)
		}
	}
	return out, nil
}

const (
	prCapbsetDrop   = 24
	prSetNoNewPrivs = 38
	prCapAmbient    = 47
	prCapAmbientAll = 4 // PR_CAP_AMBIENT_CLEAR_ALL
)

func prctl(option, arg uintptr) error {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, option, arg, 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// limitCapabilities drops from the bounding set every capability not kept, and clears the
// ambient set, so that the exec gives the command no more; with noNewPrivs, nothing it execs
// may gain any either. Called as root, before the change of user.
func limitCapabilities(kept []int, noNewPrivs bool) error {
	keep := map[int]bool{}
	for _, c := range kept {
		keep[c] = true
	}
	for c := range capabilityNames {
		if keep[c] {
			continue
		}
		// EINVAL: a capability this kernel does not know; nothing to drop.
		if err := prctl(prCapbsetDrop, uintptr(c)); err != nil && err != syscall.EINVAL {
			return fmt.Errorf("dropping CAP_%s: %w", capabilityNames[c], err)
		}
	}
	if err := prctl(prCapAmbient, prCapAmbientAll); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if noNewPrivs {
		if err := prctl(prSetNoNewPrivs, 1); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	return nil
}
