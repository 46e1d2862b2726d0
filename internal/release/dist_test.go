package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSums: SHA256SUMS as sha256sum writes and checks it.
func TestSums(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"sqlelect_v1_linux_amd64": "a", "sqlelect_v1_windows_amd64.exe": "bb", "notes.txt": "not summed"})
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  sqlelect_v1_linux_amd64\n" +
		"3b64db95cb55c763391c707108489ae18b4112d783300de38e033b4c98c3deaf  sqlelect_v1_windows_amd64.exe\n"
	if string(data) != want {
		t.Fatalf("SHA256SUMS:\n%s\nwant\n%s", data, want)
	}
	sums, err := parseSums(data)
	if err != nil || len(sums) != 2 || sums["sqlelect_v1_linux_amd64"] != want[:64] {
		t.Fatalf("parseSums: %v, %v", sums, err)
	}
	if sha, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command(sha, "--check", "--strict", sumsFile)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check: %v\n%s", err, out)
		}
	}
	for _, bad := range []string{"abc  x\n", want[:64] + " x\n" + want[:64] + " x\n", want[:64] + "  two words\n"} {
		if _, err := parseSums([]byte(bad)); err == nil {
			t.Errorf("parseSums(%q) took it", bad)
		}
	}
}

// TestCheckDist: every way a dist directory can be wrong is reported.
func TestCheckDist(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"sqlelect_v0.0.1_linux_amd64": "old"}
	for _, tg := range targets[1:] { // no linux/amd64 of this version
		files[binaryName("v0.1.0", tg)] = "not a binary"
	}
	writeFiles(t, dir, files)
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	// One sum that no longer matches.
	writeFiles(t, dir, map[string]string{binaryName("v0.1.0", targets[1]): "changed after summing"})
	var out bytes.Buffer
	err := checkDist(dir, "v0.1.0", &out)
	if err == nil {
		t.Fatal("checkDist passed")
	}
	for _, want := range []string{
		"sqlelect_v0.0.1_linux_amd64: not a file of release v0.1.0",
		"sqlelect_v0.1.0_linux_amd64: missing",
		"SHA256SUMS lists sqlelect_v0.0.1_linux_amd64, not a binary of release v0.1.0",
		"sqlelect_v0.1.0_linux_arm64: sha256 ",
		"sqlelect_v0.1.0_darwin_amd64: not a Mach-O executable",
		"sqlelect_v0.1.0_windows_arm64.exe: not a PE executable",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("checkDist:\n%v\nwant a line with %q", err, want)
		}
	}
	if err := checkDist(dir, "v0.1.0/../x", &out); err == nil || !strings.Contains(err.Error(), "file name") {
		t.Errorf("checkDist with a version that is no file name: %v", err)
	}
}

// TestCheckFormat: this test's own executable is of its platform's format
// and architecture, and not of another architecture's.
func TestCheckFormat(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := target{runtime.GOOS, runtime.GOARCH}
	known := false
	for _, tg := range targets {
		known = known || tg == host
	}
	if !known {
		t.Skipf("%s/%s is not a release platform", host.GOOS, host.GOARCH)
	}
	if err := checkFormat(exe, host); err != nil && !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("checkFormat of the test binary: %v", err)
	}
	other := host
	other.GOARCH = map[string]string{"amd64": "arm64", "arm64": "amd64"}[host.GOARCH]
	if err := checkFormat(exe, other); err == nil {
		t.Errorf("checkFormat took the test binary for %s/%s", other.GOOS, other.GOARCH)
	}
	if err := checkBinary(exe, host); err == nil {
		t.Error("checkBinary took the test binary for the sqlelect command")
	}
}

// TestCheckVersionCommand: a command without a version subcommand is
// let through with a message; once it has one, it must print the version.
func TestCheckVersionCommand(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in commands are shell scripts")
	}
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, body, version, want string // want: "" passes, "SKIP" passes with the message, else the error
	}{
		{"none", `echo 'sqlelect: unknown command "version"' >&2; echo usage >&2; exit 2`, "v0.1.0", "SKIP"},
		{"right", `echo "sqlelect v0.1.0 (go1.26.8, revision abc)"`, "v0.1.0", ""},
		{"json", `echo '{"version":"v0.1.0","go":"go1.26.8"}'`, "v0.1.0", ""},
		{"prefix", `echo "sqlelect v0.1.0-rc.1"`, "v0.1.0", "without v0.1.0"},
		{"empty", `echo "sqlelect (devel)"`, "v0.1.0", "without v0.1.0"},
		{"fails", `echo boom >&2; exit 1`, "v0.1.0", "exit status 1"},
		{"other usage error", `echo 'sqlelect: version takes no arguments' >&2; exit 2`, "v0.1.0", "exit status 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := checkVersionCommand(script(strings.ReplaceAll(tt.name, " ", "_"), tt.body), tt.version, &out)
			switch tt.want {
			case "":
				if err != nil || !strings.Contains(out.String(), tt.version) {
					t.Errorf("err %v, output %q", err, out.String())
				}
			case "SKIP":
				if err != nil || !strings.HasPrefix(out.String(), "SKIP: ") {
					t.Errorf("err %v, output %q", err, out.String())
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err %v, want %q", err, tt.want)
				}
			}
		})
	}
}

func TestContainsWord(t *testing.T) {
	for s, want := range map[string]bool{
		"sqlelect v0.1.0":          true,
		"sqlelect v0.1.0\n":        true,
		"version: v0.1.0, go1.26":  true,
		"sqlelect v0.1.0.":         true,
		`{"version":"v0.1.0"}`:     true,
		"sqlelect v0.1.0-rc.1":     false,
		"sqlelect v0.1.01":         false,
		"sqlelect xv0.1.0":         false,
		"sqlelect v0.1.0.1":        false,
		"sqlelect v0.1.0+incompat": false,
	} {
		if got := containsWord(s, "v0.1.0"); got != want {
			t.Errorf("containsWord(%q) = %v, want %v", s, got, want)
		}
	}
}
