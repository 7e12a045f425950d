package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The kubelet reads container logs in the CRI format: "<RFC3339Nano> <stream> <P|F> <text>".
func TestCRILogLinesAreWhatTheKubeletParses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := openLog(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &criLog{f: f}
	w.copy("stdout", strings.NewReader("first line\nsecond\nno newline at the end"))
	w.copy("stderr", strings.NewReader("oops\n"))
	f.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	format := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z (stdout|stderr) (F|P) (.*)$`)
	var got []string
	for _, line := range lines {
		m := format.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a CRI log line: %q", line)
		}
		got = append(got, m[2]+" "+m[3]+" "+m[4])
	}
	want := []string{"stdout F first line", "stdout F second", "stdout P no newline at the end", "stderr F oops"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestKubeletPathsMapToTheNodesDirectoriesLongestFirst(t *testing.T) {
	m, err := parsePathMap("--host-path", []string{"/var/lib=/n/var/lib", "/var/lib/kubelet/pods=/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"/var/lib/kubelet/pods/u/x": "/elsewhere/u/x",
		"/var/lib/other":            "/n/var/lib/other",
		"/var/library":              "/var/library", // a prefix of the name, not of the path
		"/sys":                      "/sys",
	} {
		if got := remap(m, in); got != want {
			t.Errorf("remap(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := parsePathMap("--host-path", []string{"relative=/x"}); err == nil {
		t.Error("a relative kubelet path was accepted")
	}
}

// A checkout under /tmp is covered by the emptyDir pods mount at /tmp: the runtime lays the
// image over the volume again, and only there.
func TestAnImageDirectoryUnderAVolumeIsCovered(t *testing.T) {
	mounts := []mount{{Target: "/tmp"}, {Target: "/etc/topoplace/policies"}}
	for dir, want := range map[string]bool{
		"/tmp/ci/main": true, "/tmp": true, "/tmpfoo": false, "/usr": false, "/etc": false,
	} {
		if got := coveredByMount(dir, mounts); got != want {
			t.Errorf("coveredByMount(%q) = %v, want %v", dir, got, want)
		}
	}
}
