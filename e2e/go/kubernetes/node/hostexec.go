package main

// Containers of one image, Topoplace's own, run for real: as processes on this
// host, each in a mount namespace of its own whose root is the image (host
// directories, read-only) plus the mounts the kubelet asked for. The command,
// args and env are the kubelet's, downward API and $(VAR) already resolved.
// stdout and stderr go to the container's CRI log file, the exit code and the
// termination message file back to the kubelet. Every other image stays
// simulated.

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostExec says which image runs for real and how this node's paths map.
type hostExec struct {
	image     string   // the image reference that runs as host processes
	imageDirs []string // host directories the image is made of
	path      string   // PATH inside the container
	apiServer string   // host:port the in-cluster client dials for the kubernetes Service
	state     string   // host directory for the containers' roots and specs
	// The kubelet's view of a host path → where it lives on this host, longest first:
	// the kubelet runs with the node's /var/lib and /var/log bound over the host's. For
	// the files the runtime itself writes (container logs).
	pathMap []pathMapping
	// hostPath volumes a node's machine supplies: /sys is the machine's sysfs tree.
	volumeMap []pathMapping
	// The pid file of the process holding the node's mount namespace: the kubelet runs in
	// it, and containers start in it, where the kubelet's volume mounts (the tmpfs of a
	// projected token, say) are.
	nsPidFile string
	// KEY=VALUE every container gets unless the kubelet sets KEY: the pod network's egress
	// proxy and the cluster's add-ons.
	env  []string
	self string // this binary, re-executed as the container's init

	mu    sync.Mutex
	procs map[string]*hostProcess // by container ID
}

type pathMapping struct{ kubelet, host string }

type hostProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func newHostExec(image, path, state, apiServer, nsPidFile string, imageDirs, hostPaths, volumePaths, env []string) (*hostExec, error) {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	if state == "" || !filepath.IsAbs(state) {
		return nil, fmt.Errorf("--exec-image needs an absolute --exec-state")
	}
	if _, _, ok := strings.Cut(apiServer, ":"); !ok {
		return nil, fmt.Errorf("--exec-image needs --kubernetes-service HOST:PORT")
	}
	for _, d := range imageDirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("--exec-image-dir %q is not absolute", d)
		}
		if _, err := os.Lstat(d); err != nil {
			return nil, fmt.Errorf("--exec-image-dir: %w", err)
		}
	}
	if nsPidFile == "" {
		return nil, fmt.Errorf("--exec-image needs --mount-namespace-pid-file")
	}
	pathMap, err := parsePathMap("--host-path", hostPaths)
	if err != nil {
		return nil, err
	}
	volumeMap, err := parsePathMap("--volume-path", volumePaths)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	return &hostExec{
		image: image, imageDirs: imageDirs, path: path, apiServer: apiServer, state: state,
		pathMap: pathMap, volumeMap: volumeMap, nsPidFile: nsPidFile, env: env, self: self,
		procs: map[string]*hostProcess{},
	}, nil
}

func parsePathMap(name string, flags []string) ([]pathMapping, error) {
	var out []pathMapping
	for _, f := range flags {
		k, h, ok := strings.Cut(f, "=")
		if !ok || !filepath.IsAbs(k) || !filepath.IsAbs(h) {
			return nil, fmt.Errorf("%s %q: want KUBELET_PATH=HOST_PATH, both absolute", name, f)
		}
		out = append(out, pathMapping{filepath.Clean(k), filepath.Clean(h)})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i].kubelet) > len(out[j].kubelet) })
	return out, nil
}

// onHost is where a path of the kubelet's mount namespace lives on this host.
func (h *hostExec) onHost(p string) string { return remap(h.pathMap, p) }

func remap(mappings []pathMapping, p string) string {
	p = filepath.Clean(p)
	for _, m := range mappings {
		if p == m.kubelet || strings.HasPrefix(p, m.kubelet+"/") {
			return m.host + p[len(m.kubelet):]
		}
	}
	return p
}

func (h *hostExec) runs(image string) bool { return h != nil && image == h.image }

// specFor turns the kubelet's container config into the init's spec.
func (h *hostExec) specFor(id string, cfg *runtimeapi.ContainerConfig) (containerSpec, error) {
	env := []string{"PATH=" + h.path}
	host, port, _ := strings.Cut(h.apiServer, ":")
	for _, kv := range cfg.GetEnvs() {
		switch kv.Key {
		case "PATH":
			continue // the image's own
		case "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS":
			// What kube-proxy would do for the kubernetes Service: its ClusterIP is never dialled.
			continue
		}
		env = append(env, kv.Key+"="+string(kv.Value))
	}
	env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port,
		"KUBERNETES_SERVICE_PORT_HTTPS="+port)
	for _, kv := range h.env {
		if key, _, _ := strings.Cut(kv, "="); !hasEnv(env, key) {
			env = append(env, kv)
		}
	}
	mounts := make([]mount, 0, len(cfg.GetMounts()))
	for _, m := range cfg.GetMounts() {
		mounts = append(mounts, mount{Source: remap(h.volumeMap, m.HostPath), Target: m.ContainerPath, ReadOnly: m.Readonly})
	}
	// Parents before what sits inside them.
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(filepath.Clean(mounts[i].Target), "/") < strings.Count(filepath.Clean(mounts[j].Target), "/")
	})
	spec := containerSpec{
		Rootfs:  filepath.Join(h.state, id, "rootfs"),
		Image:   h.imageDirs,
		Argv:    append(append([]string{}, cfg.GetCommand()...), cfg.GetArgs()...),
		Env:     env,
		WorkDir: cfg.GetWorkingDir(),
		Mounts:  mounts,
	}
	sc := cfg.GetLinux().GetSecurityContext()
	if u := sc.GetRunAsUser(); u != nil {
		v := u.Value
		spec.UID = &v
	}
	if g := sc.GetRunAsGroup(); g != nil {
		v := g.Value
		spec.GID = &v
	}
	spec.Groups = sc.GetSupplementalGroups()
	if !hasEnv(env, "HOME") {
		// As runc does: the user's home from the image's /etc/passwd, else /.
		spec.Env = append(spec.Env, "HOME="+homeOf(spec.UID))
	}
	spec.ReadOnlyRoot = sc.GetReadonlyRootfs()
	spec.NoNewPrivs = sc.GetNoNewPrivs()
	caps, err := keptCapabilities(sc.GetPrivileged(), sc.GetCapabilities().GetAddCapabilities(),
		sc.GetCapabilities().GetDropCapabilities())
	if err != nil {
		return containerSpec{}, err
	}
	spec.Capabilities = caps
	return spec, nil
}

// start runs the container; onExit is called once with its exit code and reason.
func (h *hostExec) start(id, logPath string, cfg *runtimeapi.ContainerConfig, onExit func(code int32, reason string)) error {
	spec, err := h.specFor(id, cfg)
	if err != nil {
		return err
	}
	if len(spec.Argv) == 0 {
		return fmt.Errorf("the image has no default command: the container must give one")
	}
	// As runc refuses to start it: the command must exist in the image (whose directories
	// are the host's, so the host's lookup is the image's).
	if err := h.resolvable(spec.Argv[0]); err != nil {
		return err
	}
	dir := filepath.Join(h.state, id)
	if err := os.MkdirAll(spec.Rootfs, 0o755); err != nil {
		return err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	specFile := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specFile, raw, 0o600); err != nil {
		return err
	}
	logFile, err := openLog(h.onHost(logPath))
	if err != nil {
		return err
	}
	holder, err := os.ReadFile(h.nsPidFile)
	if err != nil {
		logFile.Close()
		return fmt.Errorf("the node's mount namespace: %w", err)
	}
	ns := fmt.Sprintf("/proc/%s/ns/mnt", strings.TrimSpace(string(holder)))
	// Into the node's mount namespace, then a private copy of it for the container.
	cmd := exec.Command("nsenter", "--mount="+ns, "--", "unshare", "--mount", "--propagation", "private",
		"--", h.self, "container-init", specFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	p := &hostProcess{cmd: cmd, done: make(chan struct{})}
	h.mu.Lock()
	h.procs[id] = p
	h.mu.Unlock()
	w := &criLog{f: logFile}
	var copies sync.WaitGroup
	copies.Go(func() { w.copy("stdout", stdout) })
	copies.Go(func() { w.copy("stderr", stderr) })
	go func() {
		copies.Wait()
		err := cmd.Wait()
		logFile.Close()
		code, reason := int32(0), "Completed"
		if err != nil {
			code, reason = 1, "Error"
			if ee, ok := err.(*exec.ExitError); ok {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = int32(128 + ws.Signal())
				} else {
					code = int32(ee.ExitCode())
				}
			}
		}
		log.Printf("container %s exited %d (%s)", id, code, reason)
		onExit(code, reason)
		close(p.done)
	}()
	log.Printf("container %s running as pid %d: %s", id, cmd.Process.Pid, strings.Join(spec.Argv, " "))
	return nil
}

func (h *hostExec) resolvable(name string) error {
	if strings.Contains(name, "/") {
		if info, err := os.Stat(name); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return fmt.Errorf("exec: %q: no such executable file in the image", name)
		}
		return nil
	}
	for _, dir := range filepath.SplitList(h.path) {
		if info, err := os.Stat(filepath.Join(dir, name)); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("exec: %q: executable file not found in $PATH (%s)", name, h.path)
}

// stop sends SIGTERM, then SIGKILL after the grace period, and waits for the exit.
func (h *hostExec) stop(id string, grace time.Duration) {
	h.mu.Lock()
	p := h.procs[id]
	h.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// remove stops the container if it still runs and removes its root and spec.
func (h *hostExec) remove(id string) {
	h.stop(id, 0)
	h.mu.Lock()
	delete(h.procs, id)
	h.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(h.state, id)); err != nil {
		log.Printf("removing container %s: %v", id, err)
	}
}

// stopAll ends every container at shutdown.
func (h *hostExec) stopAll() {
	h.mu.Lock()
	ids := make([]string, 0, len(h.procs))
	for id := range h.procs {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.remove(id)
	}
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

func homeOf(uid *int64) string {
	id := int64(0)
	if uid != nil {
		id = *uid
	}
	raw, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "/"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 6 && f[2] == fmt.Sprint(id) {
			return f[5]
		}
	}
	return "/"
}
