package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// devicesFile is the --devices file: the devices each resource advertises.
type devicesFile struct {
	Resources []resourceSpec `json:"resources"`
}

type resourceSpec struct {
	Resource string       `json:"resource"` // extended resource name, e.g. nvidia.com/gpu
	Env      string       `json:"env"`      // set by Allocate to the IDs given
	Devices  []deviceSpec `json:"devices"`
}

type deviceSpec struct {
	ID   string `json:"id"`
	NUMA *int   `json:"numa"` // absent or -1: unknown, no topology reported
}

// maxSocketPath is what fits in sun_path with its terminating NUL.
const maxSocketPath = 107

var unsafeSocketChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// loadPlugins reads and checks the devices file and makes one plugin per
// resource that has devices, each on its own socket in dir.
func loadPlugins(path, dir string) ([]*plugin, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--devices: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt field would silently drop devices
	var f devicesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--devices %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("--devices %s: data after the JSON object", path)
	}
	if f.Resources == nil {
		return nil, fmt.Errorf("--devices %s: resources: missing", path)
	}

	var plugins []*plugin
	resources := map[string]bool{}
	sockets := map[string]bool{}
	for i, r := range f.Resources {
		field := fmt.Sprintf("--devices %s: resources[%d]", path, i)
		if err := checkResourceName(r.Resource); err != nil {
			return nil, fmt.Errorf("%s.resource: %w", field, err)
		}
		if resources[r.Resource] {
			return nil, fmt.Errorf("%s.resource: %q is listed twice", field, r.Resource)
		}
		resources[r.Resource] = true
		if errs := validation.IsEnvVarName(r.Env); r.Env == "" || len(errs) > 0 {
			return nil, fmt.Errorf("%s.env: %q is not an environment variable name: %s", field, r.Env, strings.Join(errs, "; "))
		}
		if len(r.Devices) == 0 {
			log.Printf("%s has no devices: no device plugin for it", r.Resource)
			continue
		}
		devices := make([]*pluginapi.Device, 0, len(r.Devices))
		ids := map[string]bool{}
		for j, d := range r.Devices {
			dfield := fmt.Sprintf("%s.devices[%d]", field, j)
			switch {
			case d.ID == "":
				return nil, fmt.Errorf("%s.id: missing or empty", dfield)
			case strings.Contains(d.ID, ","):
				return nil, fmt.Errorf("%s.id: %q has a comma, which separates IDs in %s", dfield, d.ID, r.Env)
			case ids[d.ID]:
				return nil, fmt.Errorf("%s.id: %q is listed twice", dfield, d.ID)
			case d.NUMA != nil && *d.NUMA < -1:
				return nil, fmt.Errorf("%s.numa: %d is neither a NUMA node nor -1 (unknown)", dfield, *d.NUMA)
			}
			ids[d.ID] = true
			dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
			if d.NUMA != nil && *d.NUMA >= 0 {
				// What the Topology Manager's hints are made from.
				dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(*d.NUMA)}}}
			}
			devices = append(devices, dev)
		}

		// Short names: unix socket paths are limited to 108 bytes.
		short := unsafeSocketChars.ReplaceAllString(r.Resource[strings.LastIndex(r.Resource, "/")+1:], "_")
		name := "topoplace-" + short + ".sock"
		if sockets[name] {
			name = "topoplace-" + short + "-" + strconv.Itoa(i) + ".sock"
		}
		sockets[name] = true
		socket := filepath.Join(dir, name)
		if len(socket) > maxSocketPath {
			return nil, fmt.Errorf("--device-plugin-dir: socket path %s is longer than %d bytes", socket, maxSocketPath)
		}
		plugins = append(plugins, &plugin{
			resource: r.Resource,
			env:      r.Env,
			devices:  devices,
			known:    ids,
			dir:      dir,
			socket:   socket,
		})
	}
	return plugins, nil
}

// checkResourceName accepts what the kubelet accepts from a device plugin: an
// extended resource name, domain-prefixed and outside kubernetes.io.
func checkResourceName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("missing or empty")
	case !strings.Contains(name, "/"):
		return fmt.Errorf("%q has no domain prefix (like example.com/name)", name)
	case strings.Contains(name, "kubernetes.io/"):
		return fmt.Errorf("%q is in the kubernetes.io namespace", name)
	case strings.HasPrefix(name, "requests."):
		return fmt.Errorf("%q starts with requests.", name)
	}
	// The kubelet checks the quota form of the name.
	if errs := content.IsQualifiedName("requests." + name); len(errs) > 0 {
		return fmt.Errorf("%q is not an extended resource name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}
