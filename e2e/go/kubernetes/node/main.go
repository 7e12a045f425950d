// Command e2e-node is the per-node stand-in that a real kubelet talks to in the
// end-to-end cluster: its CRI container runtime and its device plugins, one
// process per simulated node. Nothing here runs a real container; it only
// reports what the kubelet needs to see to admit, start and account for pods,
// except the containers of one image (--exec-image), Topoplace's own, which run
// as host processes (hostexec.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// usageError makes main exit 2, the status of a bad command line or input file.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// stringsFlag is a flag that may be given more than once.
type stringsFlag []string

func (s *stringsFlag) String() string     { return fmt.Sprint(*s) }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) == 3 && os.Args[1] == "container-init" {
		// The child of a host-run container: on success this never returns.
		err := containerInit(os.Args[2])
		fmt.Fprintf(os.Stderr, "e2e-node container-init: %v\n", err)
		os.Exit(128)
	}
	if err := run(); err != nil {
		log.Print(err)
		if _, ok := err.(usageError); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run() error {
	var (
		nodeName    = flag.String("node-name", "", "name of the simulated node (required)")
		criSocket   = flag.String("cri-socket", "", "filesystem path of the CRI socket to serve (required)")
		ipPrefix    = flag.String("pod-ip-prefix", "", "first three octets of pod IPs, inside 127.0.0.0/8 (required)")
		kubeconfig  = flag.String("kubeconfig", "", "the node's kubeconfig, to tell init containers apart")
		devicesFile = flag.String("devices", "", "JSON file of the devices to advertise through device plugins")
		pluginDir   = flag.String("device-plugin-dir", "", "the kubelet's device-plugin directory, as seen from here")
		imageSize   = flag.Uint64("image-size", 100<<20, "size in bytes reported for every image")
		execImage   = flag.String("exec-image", "", "image whose containers run as host processes")
		execPath    = flag.String("exec-path", "/usr/local/bin:/usr/bin:/bin", "PATH inside a host-run container")
		execState   = flag.String("exec-state", "", "directory for host-run containers' roots")
		apiServer   = flag.String("kubernetes-service", "", "host:port that stands for the kubernetes Service in host-run containers")
		nsPid       = flag.String("mount-namespace-pid-file", "", "pid file of the process holding the node's mount namespace, where the kubelet runs: host-run containers start in it")
		imageDirs   stringsFlag
		hostPaths   stringsFlag
		volumePaths stringsFlag
		podEnv      stringsFlag
	)
	flag.Var(&podEnv, "env", "KEY=VALUE for every host-run container that the kubelet does not set (repeatable)")
	flag.Var(&volumePaths, "volume-path", "KUBELET_PATH=PATH: what a hostPath volume of KUBELET_PATH mounts instead (repeatable)")
	flag.Var(&imageDirs, "exec-image-dir", "host directory that is part of the image (repeatable)")
	flag.Var(&hostPaths, "host-path", "KUBELET_PATH=HOST_PATH: where a path of the kubelet's mount namespace is on this host (repeatable)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	if flag.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %q", flag.Args())}
	}
	for _, f := range []struct{ name, value string }{
		{"--node-name", *nodeName}, {"--cri-socket", *criSocket}, {"--pod-ip-prefix", *ipPrefix},
	} {
		if f.value == "" {
			return usageError{fmt.Errorf("%s is required", f.name)}
		}
	}
	log.SetPrefix("e2e-node " + *nodeName + ": ")
	if (*devicesFile == "") != (*pluginDir == "") {
		return usageError{fmt.Errorf("--devices and --device-plugin-dir go together")}
	}
	ips, err := newPodIPs(*ipPrefix)
	if err != nil {
		return usageError{fmt.Errorf("--pod-ip-prefix: %w", err)}
	}
	var plugins []*plugin
	if *devicesFile != "" {
		dir, err := filepath.Abs(*pluginDir)
		if err != nil {
			return usageError{fmt.Errorf("--device-plugin-dir: %w", err)}
		}
		if plugins, err = loadPlugins(*devicesFile, dir); err != nil {
			return usageError{err}
		}
	}

	// Without a kubeconfig every container is taken for a regular one.
	var pods podLookup
	if *kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return usageError{fmt.Errorf("--kubeconfig: %w", err)}
		}
		cfg.UserAgent = "e2e-node/" + *nodeName
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return usageError{fmt.Errorf("--kubeconfig: %w", err)}
		}
		pods = newAPIPodLookup(client)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var hx *hostExec
	if *execImage != "" {
		if hx, err = newHostExec(*execImage, *execPath, *execState, *apiServer, *nsPid, imageDirs, hostPaths, volumePaths, podEnv); err != nil {
			return usageError{err}
		}
		defer hx.stopAll()
	}
	rt := newRuntime(ips, *imageSize, pods, hx)
	socket, err := filepath.Abs(*criSocket)
	if err != nil {
		return usageError{fmt.Errorf("--cri-socket: %w", err)}
	}
	if err := rt.serve(ctx, socket); err != nil {
		return err
	}
	defer rt.stop()
	log.Printf("CRI runtime serving on %s (pod IPs %s.1-254)", socket, *ipPrefix)
	// The harness waits for this line (or the socket file) before it starts
	// the kubelet. os.Stdout is unbuffered: the line is out once this returns.
	if _, err := fmt.Println("ready"); err != nil {
		return err
	}

	var wg sync.WaitGroup
	for _, p := range plugins {
		wg.Go(func() { p.run(ctx) })
	}
	<-ctx.Done()
	log.Print("shutting down")
	wg.Wait() // each plugin removes its own socket
	return nil
}
