package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func dial(t *testing.T, socket string) *grpc.ClientConn {
	conn := must(grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials())))(t)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestRuntime(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}}}}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&pod)
	}))
	defer api.Close()
	rt := newRuntime(must(newPodIPs("127.0.3"))(t), 1234,
		newAPIPodLookup(must(kubernetes.NewForConfig(&rest.Config{Host: api.URL}))(t)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	if err := rt.serve(ctx, socket); err != nil {
		t.Fatal(err)
	}
	defer rt.stop()
	conn := dial(t, socket)
	rs, is := runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)

	run := func(name string, network runtimeapi.NamespaceMode) (string, string) {
		cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: "u1"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: network}}}}
		id := must(rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}))(t).PodSandboxId
		st := must(rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}))(t).Status
		return id, st.GetNetwork().GetIp()
	}
	a, ipA := run("p", runtimeapi.NamespaceMode_POD)
	_, ipH := run("h", runtimeapi.NamespaceMode_NODE)
	_, ipB := run("q", runtimeapi.NamespaceMode_POD)
	if ipA != "127.0.3.1" || ipH != "" || ipB != "127.0.3.2" {
		t.Fatalf("IPs %q %q %q, want 127.0.3.1, none (host network), 127.0.3.2", ipA, ipH, ipB)
	}
	must(rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: a}))(t)
	a, ipA = run("p", runtimeapi.NamespaceMode_POD)
	if ipA != "127.0.3.1" {
		t.Fatalf("IP after remove %q, want 127.0.3.1 again", ipA)
	}

	img := &runtimeapi.ImageSpec{Image: "busybox:1"}
	must(is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: img}))(t)
	if size := must(is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: img}))(t).GetImage().GetSize(); size != 1234 {
		t.Fatalf("image size %d, want 1234", size)
	}

	for name, want := range map[string]runtimeapi.ContainerState{
		"init": runtimeapi.ContainerState_CONTAINER_EXITED, "sidecar": runtimeapi.ContainerState_CONTAINER_RUNNING,
		"main": runtimeapi.ContainerState_CONTAINER_RUNNING} {
		labels := map[string]string{"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.name": "p",
			"io.kubernetes.pod.uid": "u1", "io.kubernetes.container.name": name}
		id := must(rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: a, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: img, Labels: labels, LogPath: name + "/0.log"},
			SandboxConfig: &runtimeapi.PodSandboxConfig{LogDirectory: "/var/log/pods/ns_p_u1"}}))(t).ContainerId
		must(rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}))(t)
		st := must(rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}))(t).Status
		if st.State != want || st.ExitCode != 0 || st.LogPath != "/var/log/pods/ns_p_u1/"+name+"/0.log" {
			t.Errorf("%s: state %v exit %d log %q, want %v exit 0", name, st.State, st.ExitCode, st.LogPath, want)
		}
	}
}

// fakeKubelet is the kubelet's registration service.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.got <- r
	return &pluginapi.Empty{}, nil
}

func TestDevicePlugin(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "devices.json")
	os.WriteFile(file, []byte(`{"resources": [{"resource": "nvidia.com/gpu", "env": "NVIDIA_VISIBLE_DEVICES",
		"devices": [{"id": "0", "numa": 1}, {"id": "1"}]}, {"resource": "rdma/ib", "env": "X", "devices": []}]}`), 0o644)
	plugins := must(loadPlugins(file, dir))(t)
	if len(plugins) != 1 {
		t.Fatalf("%d plugins, want 1", len(plugins))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go plugins[0].run(ctx)

	for round := range 2 { // the second round is a kubelet restart
		kubelet := &fakeKubelet{got: make(chan *pluginapi.RegisterRequest, 1)}
		s := grpc.NewServer()
		pluginapi.RegisterRegistrationServer(s, kubelet)
		go s.Serve(must(net.Listen("unix", filepath.Join(dir, "kubelet.sock")))(t))
		defer s.Stop()
		var req *pluginapi.RegisterRequest
		select {
		case req = <-kubelet.got:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: no registration", round)
		}
		if req.ResourceName != "nvidia.com/gpu" || req.Version != pluginapi.Version {
			t.Fatalf("registered %v", req)
		}
		dp := pluginapi.NewDevicePluginClient(dial(t, filepath.Join(dir, req.Endpoint)))
		devs := must(must(dp.ListAndWatch(ctx, &pluginapi.Empty{}))(t).Recv())(t).Devices
		if len(devs) != 2 || devs[0].GetTopology().GetNodes()[0].GetID() != 1 || devs[1].Topology != nil {
			t.Fatalf("devices %v", devs)
		}
		resp := must(dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"1", "0"}}}}))(t)
		if env := resp.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"]; env != "1,0" {
			t.Fatalf("env %q", env)
		}
		// What a starting kubelet does: remove every socket in its directory.
		for _, f := range must(filepath.Glob(filepath.Join(dir, "*.sock")))(t) {
			os.Remove(f)
		}
	}
	os.WriteFile(file, []byte(`{"resources": [{"resource": "gpu", "env": "E", "devices": []}]}`), 0o644)
	if _, err := loadPlugins(file, dir); err == nil || !strings.Contains(err.Error(), "resources[0].resource") {
		t.Fatalf("bad resource name: %v", err)
	}
}
