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

// As runc: the default set less what is dropped plus what is added; "ALL" drops everything.
func TestCapabilitiesAreTheDefaultSetLessDropPlusAdd(t *testing.T) {
	names := func(caps []int) string {
		var out []string
		for _, c := range caps {
			out = append(out, capabilityNames[c])
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		add, drop []string
		want      string
	}{
		{nil, []string{"ALL"}, ""},
		{[]string{"CHOWN"}, []string{"ALL"}, "CHOWN"}, // the agent's prepare-cache
		{[]string{"CAP_SYS_ADMIN"}, []string{"NET_RAW", "KILL", "MKNOD"}, "CHOWN,DAC_OVERRIDE,FOWNER,FSETID,SETGID,SETUID,SETPCAP,NET_BIND_SERVICE,SYS_CHROOT,SYS_ADMIN,AUDIT_WRITE,SETFCAP"},
	} {
		got, err := keptCapabilities(false, tc.add, tc.drop)
		if err != nil {
			t.Fatal(err)
		}
		if names(got) != tc.want {
			t.Errorf("add %v drop %v: got %s, want %s", tc.add, tc.drop, names(got), tc.want)
		}
	}
	if all, _ := keptCapabilities(true, nil, nil); len(all) != len(capabilityNames) {
		t.Errorf("privileged keeps %d capabilities, want all %d", len(all), len(capabilityNames))
	}
	if _, err := keptCapabilities(false, []string{"FLY"}, nil); err == nil {
		t.Error("an unknown capability was accepted")
	}
}
