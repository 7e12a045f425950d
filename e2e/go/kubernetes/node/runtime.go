package main

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
	kubetypes "k8s.io/kubelet/pkg/types"
)

const (
	runtimeName = "topoplace-e2e"
	// The kubelet refuses a runtime whose Version is not its own CRI version "0.1.0".
	criVersion     = "0.1.0"
	runtimeVersion = "0.1.0"
	// How often the fake's call log is emptied: it grows by one string per call.
	trimEvery = 10 * time.Second
	// Where the log of a container created without a log directory is said to
	// be: a directory that does not exist.
	noLogDir = "/nonexistent/topoplace-e2e-node"
)

// runtime is the upstream fake CRI runtime with what a real kubelet needs on
// top: images with a size, loopback pod IPs, and init containers that
// complete. Every RPC not overridden here is the fake's own.
type runtime struct {
	*fake.RemoteRuntime
	ips       *podIPs
	imageSize uint64
	pods      podLookup // nil: no kubeconfig, every container is a regular one
	exec      *hostExec // nil: every container is simulated

	// The kubelet's config of each container that runs for real, from create to start.
	configsMu sync.Mutex
	configs   map[string]*runtimeapi.ContainerConfig

	// Held for writing from the fake's RunPodSandbox until the sandbox's
	// address is recorded, so that no status read falls in between.
	sandboxMu sync.RWMutex

	server *grpc.Server
	socket string
}

func newRuntime(ips *podIPs, imageSize uint64, pods podLookup, hx *hostExec) *runtime {
	f := fake.NewFakeRemoteRuntime()
	// The fake only sets this in its own Start, which we do not use (we serve
	// on our own gRPC server so that our overrides are what gets registered).
	f.RuntimeService.Lock()
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	f.RuntimeService.Unlock()
	f.ImageService.SetFakeImageSize(imageSize)
	return &runtime{
		RemoteRuntime: f, ips: ips, imageSize: imageSize, pods: pods, exec: hx,
		configs: map[string]*runtimeapi.ContainerConfig{},
	}
}

// serve listens on socket (a stale file there is replaced) and serves the CRI
// runtime and image services until stop.
func (r *runtime) serve(ctx context.Context, socket string) error {
	// CreateListener binds a temporary name and renames it into place, so the
	// socket file only appears once it accepts connections.
	l, err := util.CreateListener("unix://" + socket)
	if err != nil {
		return err
	}
	r.socket = socket
	r.server = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r)
	go func() {
		if err := r.server.Serve(l); err != nil {
			log.Printf("CRI server: %v", err)
		}
	}()
	go r.trimCallLogs(ctx)
	return nil
}

func (r *runtime) stop() {
	r.server.Stop()
	if err := os.Remove(r.socket); err != nil && !os.IsNotExist(err) {
		log.Printf("removing %s: %v", r.socket, err)
	}
}

// trimCallLogs empties the fake's records of past calls, which would
// otherwise grow for as long as the kubelet polls.
func (r *runtime) trimCallLogs(ctx context.Context) {
	t := time.NewTicker(trimEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rs := r.RuntimeService
		rs.Lock()
		rs.Called = rs.Called[:0]
		rs.CheckpointedPods, rs.RestoredPods = nil, nil
		rs.Unlock()
		is := r.ImageService
		is.Lock()
		is.Called = is.Called[:0]
		is.Unlock()
	}
}

func (r *runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           criVersion,
		RuntimeName:       runtimeName,
		RuntimeVersion:    runtimeVersion,
		RuntimeApiVersion: "v1",
	}, nil
}

// PullImage stores the image at once with a size: the kubelet will not start
// a container from an image without one. The fake's own PullImage also keeps
// every request in an unexported slice that nothing can empty.
func (r *runtime) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	spec := req.GetImage()
	if spec.GetImage() == "" {
		return nil, status.Error(codes.InvalidArgument, "no image given")
	}
	is := r.ImageService
	is.Lock()
	_, had := is.Images[spec.Image]
	if !had {
		is.Images[spec.Image] = &runtimeapi.Image{
			Id:       spec.Image,
			Size:     r.imageSize,
			Spec:     spec,
			RepoTags: []string{spec.Image},
		}
	}
	is.Unlock()
	if !had {
		log.Printf("image %s pulled (%d bytes)", spec.Image, r.imageSize)
	}
	return &runtimeapi.PullImageResponse{ImageRef: spec.Image}, nil
}

// RunPodSandbox gives the sandbox a loopback IP in place of the fake's
// 192.168.192.168; a host-network sandbox gets none, as from a real runtime
// (the kubelet reports the node's addresses for it).
func (r *runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	hostNetwork := req.GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	n := 0
	if !hostNetwork {
		var err error
		if n, err = r.ips.reserve(); err != nil {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
	}
	r.sandboxMu.Lock()
	defer r.sandboxMu.Unlock()
	resp, err := r.RemoteRuntime.RunPodSandbox(ctx, req)
	if err != nil {
		if n != 0 {
			r.ips.release(n)
		}
		return nil, err
	}
	id := resp.PodSandboxId
	ip := "none (host network)"
	network := &runtimeapi.PodSandboxNetworkStatus{}
	if n != 0 {
		r.ips.bind(id, n)
		ip = r.ips.addr(n)
		network.Ip = ip
	} else {
		// A sandbox ID made again drops the address it had.
		r.ips.free(id)
	}
	rs := r.RuntimeService
	rs.Lock()
	if s, ok := rs.Sandboxes[id]; ok {
		s.Network = network
	}
	rs.Unlock()
	md := req.GetConfig().GetMetadata()
	log.Printf("sandbox %s created for pod %s/%s: IP %s", id, md.GetNamespace(), md.GetName(), ip)
	return resp, nil
}

// PodSandboxStatus reports the address from our own table: nothing the fake
// put in the sandbox's network status can show through.
func (r *runtime) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.sandboxMu.RLock()
	defer r.sandboxMu.RUnlock()
	resp, err := r.RemoteRuntime.PodSandboxStatus(ctx, req)
	if err != nil || resp.GetStatus() == nil {
		return resp, err
	}
	resp.Status.Network = &runtimeapi.PodSandboxNetworkStatus{}
	if ip, ok := r.ips.lookup(req.PodSandboxId); ok {
		resp.Status.Network.Ip = ip
	}
	return resp, nil
}

// RemovePodSandbox frees the sandbox's IP and, as CRI asks of a runtime,
// removes whatever containers are left in it (the fake keeps them forever).
func (r *runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	id := req.PodSandboxId
	rs := r.RuntimeService
	rs.Lock()
	var uid string
	if s, ok := rs.Sandboxes[id]; ok {
		uid = s.GetMetadata().GetUid()
	}
	var gone []string
	for cid, c := range rs.Containers {
		if c.SandboxID == id {
			delete(rs.Containers, cid)
			gone = append(gone, cid)
		}
	}
	rs.Unlock()
	for _, cid := range gone {
		r.forgetContainer(cid)
	}
	resp, err := r.RemoteRuntime.RemovePodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	if ip, ok := r.ips.free(id); ok {
		log.Printf("sandbox %s removed: IP %s free", id, ip)
	}
	if r.pods != nil && uid != "" {
		r.pods.forget(uid)
	}
	return resp, nil
}

// CreateContainer reports the log path a real runtime would. The fake leaves
// it empty, and when the kubelet removes a container it deletes everything
// matching "<log path>*": with an empty path, every file in its working
// directory (seen here with kubelet v1.37.2). No log file is written: the
// kubelet's view of that path may not be ours.
func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	dir, file := req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath()
	logPath := filepath.Join(dir, file)
	if !filepath.IsAbs(dir) || file == "" {
		// Not from a kubelet; still a path whose glob matches nothing.
		logPath = filepath.Join(noLogDir, resp.ContainerId+".log")
	}
	real := r.exec.runs(req.GetConfig().GetImage().GetImage())
	rs := r.RuntimeService
	rs.Lock()
	if c, ok := rs.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
		if real {
			// The kubelet finds the termination message file among the mounts.
			c.Mounts = req.GetConfig().GetMounts()
		}
	}
	rs.Unlock()
	if real {
		r.configsMu.Lock()
		r.configs[resp.ContainerId] = req.GetConfig()
		r.configsMu.Unlock()
	}
	return resp, nil
}

// RemoveContainer ends a host-run container's process and removes its root.
func (r *runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.forgetContainer(req.ContainerId)
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *runtime) forgetContainer(id string) {
	r.configsMu.Lock()
	delete(r.configs, id)
	r.configsMu.Unlock()
	if r.exec != nil {
		r.exec.remove(id)
	}
}

// StartContainer runs a container until StopContainer, except a
// non-restartable init container: that one has exited 0 by the time the
// kubelet looks again, so the pod goes on to its regular containers.
func (r *runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	id := req.ContainerId
	rs := r.RuntimeService
	rs.Lock()
	var labels map[string]string
	if c, ok := rs.Containers[id]; ok {
		labels = c.Labels
	}
	var logPath string
	if c, ok := rs.Containers[id]; ok {
		logPath = c.LogPath
	}
	rs.Unlock()
	r.configsMu.Lock()
	cfg := r.configs[id]
	r.configsMu.Unlock()
	if cfg != nil {
		return r.startReal(ctx, req, cfg, logPath, labels)
	}
	// Asked before starting and without the fake's lock: it may be an API call.
	init := r.isInitContainer(ctx, labels)

	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	what := "running"
	if init {
		rs.Lock()
		if c, ok := rs.Containers[id]; ok {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.ExitCode = 0
			c.Reason = "Completed"
			c.FinishedAt = time.Now().UnixNano()
		}
		rs.Unlock()
		what = "init container, exited 0 (Completed)"
	}
	log.Printf("container %s of pod %s/%s started: %s", labels[kubetypes.KubernetesContainerNameLabel],
		labels[kubetypes.KubernetesPodNamespaceLabel], labels[kubetypes.KubernetesPodNameLabel], what)
	return resp, nil
}

// startReal runs the container as a host process; its exit is the container's.
func (r *runtime) startReal(ctx context.Context, req *runtimeapi.StartContainerRequest, cfg *runtimeapi.ContainerConfig, logPath string, labels map[string]string) (*runtimeapi.StartContainerResponse, error) {
	id := req.ContainerId
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	rs := r.RuntimeService
	exited := func(code int32, reason string) {
		rs.Lock()
		if c, ok := rs.Containers[id]; ok {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.ExitCode = code
			c.Reason = reason
			c.FinishedAt = time.Now().UnixNano()
		}
		rs.Unlock()
	}
	if err := r.exec.start(id, logPath, cfg, exited); err != nil {
		// As a runtime reports a container that could not start: exited 128, the reason said.
		rs.Lock()
		if c, ok := rs.Containers[id]; ok {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.ExitCode = 128
			c.Reason = "StartError"
			c.Message = err.Error()
			c.FinishedAt = time.Now().UnixNano()
		}
		rs.Unlock()
		log.Printf("container %s of pod %s/%s failed to start: %v", labels[kubetypes.KubernetesContainerNameLabel],
			labels[kubetypes.KubernetesPodNamespaceLabel], labels[kubetypes.KubernetesPodNameLabel], err)
		return nil, status.Error(codes.Unknown, err.Error())
	}
	log.Printf("container %s of pod %s/%s started as a host process", labels[kubetypes.KubernetesContainerNameLabel],
		labels[kubetypes.KubernetesPodNamespaceLabel], labels[kubetypes.KubernetesPodNameLabel])
	return resp, nil
}

func (r *runtime) isInitContainer(ctx context.Context, labels map[string]string) bool {
	ns := labels[kubetypes.KubernetesPodNamespaceLabel]
	name := labels[kubetypes.KubernetesPodNameLabel]
	container := labels[kubetypes.KubernetesContainerNameLabel]
	if r.pods == nil || ns == "" || name == "" || container == "" {
		return false
	}
	inits, err := r.pods.initContainers(ctx, ns, name, labels[kubetypes.KubernetesPodUIDLabel])
	if err != nil {
		log.Printf("container %s of pod %s/%s taken for a regular one: %v", container, ns, name, err)
		return false
	}
	return inits[container]
}

func (r *runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if r.exec != nil {
		r.exec.stop(req.ContainerId, time.Duration(req.Timeout)*time.Second)
	}
	resp, err := r.RemoteRuntime.StopContainer(ctx, req)
	if err == nil {
		log.Printf("container %s stopped", req.ContainerId)
	}
	return resp, err
}

// ExecSync runs an exec probe's command in a host-run container for real; in a
// simulated one it succeeds with no output, as the fake's does.
func (r *runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if r.exec != nil {
		out, errOut, code, ok, err := r.exec.execSync(ctx, req.ContainerId, req.Cmd, time.Duration(req.Timeout)*time.Second)
		if ok {
			if err != nil {
				return nil, status.Error(codes.Unknown, err.Error())
			}
			return &runtimeapi.ExecSyncResponse{Stdout: out, Stderr: errOut, ExitCode: code}, nil
		}
	}
	return r.RemoteRuntime.ExecSync(ctx, req)
}
