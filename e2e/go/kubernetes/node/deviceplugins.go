package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// pollEvery is how often a plugin checks that its socket and the kubelet's
// are the ones it registered with.
const pollEvery = 500 * time.Millisecond

// plugin is one resource's device plugin. The RPC handlers read only the
// fields set by loadPlugins; server and ident belong to the run goroutine.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource string
	env      string
	devices  []*pluginapi.Device
	known    map[string]bool
	dir      string // the kubelet's device-plugin directory
	socket   string // our socket in dir

	server *grpc.Server
	ident  fileID // the socket file this server made
}

// fileID tells a file from another made later at the same path.
type fileID struct {
	dev, ino uint64
	ctime    int64
}

func statID(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim.Nano()}, true
}

// run serves and registers the plugin until ctx ends. A kubelet that starts
// deletes every socket in its directory and makes a new kubelet.sock, and
// forgets its plugins: either sign makes us serve and register afresh.
func (p *plugin) run(ctx context.Context) {
	defer p.stopServer(true)
	kubeletSock := filepath.Join(p.dir, filepath.Base(pluginapi.KubeletSocket))
	var registeredWith fileID // the kubelet.sock we last registered with
	registered, waiting := false, false
	lastErr := ""
	// Errors repeat every poll while they last: log each one once.
	report := func(err error) {
		if err.Error() != lastErr {
			log.Printf("%s: %v (retrying)", p.resource, err)
			lastErr = err.Error()
		}
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if p.server != nil {
			if id, ok := statID(p.socket); !ok || id != p.ident {
				log.Printf("%s: socket %s was removed (the kubelet (re)started?): serving on a fresh one", p.resource, p.socket)
				p.stopServer(false)
			}
		}
		if p.server == nil {
			if err := p.startServer(); err != nil {
				report(err)
			}
			registeredWith = fileID{}
		}
		kubeletID, up := statID(kubeletSock)
		switch {
		case p.server == nil:
			// Not serving: try again at the next poll.
		case !up:
			if !waiting {
				log.Printf("%s: waiting for %s", p.resource, kubeletSock)
				waiting = true
			}
		case kubeletID != registeredWith:
			if err := p.register(ctx, kubeletSock); err != nil {
				report(fmt.Errorf("registering with %s: %w", kubeletSock, err))
				break
			}
			verb := "registered"
			if registered {
				verb = "re-registered"
			}
			log.Printf("%s: %s with the kubelet (endpoint %s, %d devices)",
				p.resource, verb, filepath.Base(p.socket), len(p.devices))
			registeredWith, registered, waiting, lastErr = kubeletID, true, false, ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *plugin) startServer() error {
	if err := os.MkdirAll(p.dir, 0o750); err != nil {
		return err
	}
	if err := os.Remove(p.socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing stale %s: %w", p.socket, err)
	}
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return err
	}
	// We remove the file ourselves, and only if it is still ours.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	id, ok := statID(p.socket)
	if !ok {
		l.Close()
		return fmt.Errorf("%s vanished as soon as it was made", p.socket)
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	go func() {
		if err := s.Serve(l); err != nil {
			log.Printf("%s: plugin server: %v", p.resource, err)
		}
	}()
	p.server, p.ident = s, id
	return nil
}

func (p *plugin) stopServer(removeSocket bool) {
	if p.server == nil {
		return
	}
	p.server.Stop() // also ends ListAndWatch streams
	p.server = nil
	if id, ok := statID(p.socket); removeSocket && ok && id == p.ident {
		if err := os.Remove(p.socket); err != nil {
			log.Printf("%s: removing %s: %v", p.resource, p.socket, err)
		}
	}
}

// register tells the kubelet about us; it dials our endpoint, relative to its
// own view of the directory, before it answers.
func (p *plugin) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends every device once, healthy; they never change.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// Allocate sets env to the IDs given, in the order the kubelet asked, so that
// a test can see in the container what the device manager picked.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		for _, id := range cr.DevicesIds {
			if !p.known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "%s: no device %q", p.resource, id)
			}
		}
		ids := strings.Join(cr.DevicesIds, ",")
		log.Printf("%s: Allocate %s=%s", p.resource, p.env, ids)
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerAllocateResponse{Envs: map[string]string{p.env: ids}})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
