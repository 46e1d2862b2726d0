package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// target is a platform the release builds the command for.
type target struct{ GOOS, GOARCH string }

// targets are the platforms of `make release`.
var targets = []target{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// sumsFile is the name of the checksums file beside the binaries.
const sumsFile = "SHA256SUMS"

// versionName is what a version stamped into file names may look like.
var versionName = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+-]*$`)

// binaryName is the file name of the command built for t.
func binaryName(version string, t target) string {
	name := "sqlelect_" + version + "_" + t.GOOS + "_" + t.GOARCH
	if t.GOOS == "windows" {
		name += ".exe"
	}
	return name
}

// writeSums writes dir/SHA256SUMS for the files sqlelect_* of dir, in the
// form of sha256sum and shasum -a 256, sorted by name.
func writeSums(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "sqlelect_*"))
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("%s: no sqlelect_* files to sum", dir)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.Base(n))
	}
	return os.WriteFile(filepath.Join(dir, sumsFile), []byte(b.String()), 0o644)
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var sumLine = regexp.MustCompile(`^([0-9a-f]{64}) [ *](\S+)$`)

// parseSums reads a SHA256SUMS file: file name -> hex sum.
func parseSums(data []byte) (map[string]string, error) {
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		m := sumLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q is not \"<sha256>  <file>\"", sumsFile, i+1, line)
		}
		if _, dup := sums[m[2]]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", sumsFile, i+1, m[2])
		}
		sums[m[2]] = m[1]
	}
	return sums, nil
}

// checkDist checks what `make release VERSION=version` left in dir: a
// binary per target and nothing else but SHA256SUMS, which lists exactly
// them with their sums; each binary of its platform's format and
// architecture, built from cmd/sqlelect with CGO_ENABLED=0 and -trimpath.
// The binary of this platform, if any, runs `sqlelect version`, which must
// print version; while the command has no version command (it answers
// "unknown command", exit 2), that check is skipped with a message.
func checkDist(dir, version string, stdout io.Writer) error {
	if !versionName.MatchString(version) {
		return fmt.Errorf("version %q: letters, digits and . _ + - only, so that it can be part of a file name", version)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	want := map[string]target{}
	for _, t := range targets {
		want[binaryName(version, t)] = t
	}
	var problems []string
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
		if _, ok := want[e.Name()]; !ok && e.Name() != sumsFile {
			problems = append(problems, fmt.Sprintf("%s: not a file of release %s (an older build?)", e.Name(), version))
		}
	}
	for _, t := range targets {
		if !present[binaryName(version, t)] {
			problems = append(problems, fmt.Sprintf("%s: missing (%s/%s)", binaryName(version, t), t.GOOS, t.GOARCH))
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		return errors.Join(append(toErrors(problems), err)...)
	}
	sums, err := parseSums(data)
	if err != nil {
		return errors.Join(append(toErrors(problems), err)...)
	}
	for name := range sums {
		if _, ok := want[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s lists %s, not a binary of release %s", sumsFile, name, version))
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !present[name] {
			continue
		}
		file := filepath.Join(dir, name)
		got, err := fileSHA256(file)
		if err != nil {
			return err
		}
		switch listed, ok := sums[name]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s does not list %s", sumsFile, name))
		case listed != got:
			problems = append(problems, fmt.Sprintf("%s: sha256 %s, %s says %s", name, got, sumsFile, listed))
		}
		if err := checkBinary(file, want[name]); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		fmt.Fprintf(stdout, "%s  %s  %s/%s, no cgo, -trimpath\n", got[:12], name, want[name].GOOS, want[name].GOARCH)
	}
	if len(problems) > 0 {
		return errors.Join(toErrors(problems)...)
	}
	host := target{runtime.GOOS, runtime.GOARCH}
	if _, ok := want[binaryName(version, host)]; ok {
		return checkVersionCommand(filepath.Join(dir, binaryName(version, host)), version, stdout)
	}
	fmt.Fprintf(stdout, "no binary for %s/%s, the platform this runs on: `sqlelect version` not run\n", host.GOOS, host.GOARCH)
	return nil
}

func toErrors(problems []string) []error {
	var errs []error
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	return errs
}

// checkBinary checks that file is an executable of t's format and
// architecture (on Linux, static: no program interpreter) and that its
// build information names cmd/sqlelect, CGO_ENABLED=0, t and -trimpath.
func checkBinary(file string, t target) error {
	if err := checkFormat(file, t); err != nil {
		return err
	}
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return err
	}
	if bi.Path != corePath+"/cmd/sqlelect" || bi.Main.Path != corePath {
		return fmt.Errorf("built from %s in module %s, want %s/cmd/sqlelect", bi.Path, bi.Main.Path, corePath)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOOS": t.GOOS, "GOARCH": t.GOARCH, "-trimpath": "true"} {
		if settings[k] != v {
			return fmt.Errorf("built with %s=%q, want %q", k, settings[k], v)
		}
	}
	return nil
}

// checkFormat checks the executable format and architecture of file.
func checkFormat(file string, t target) error {
	switch t.GOOS {
	case "linux":
		f, err := elf.Open(file)
		if err != nil {
			return fmt.Errorf("not an ELF executable: %v", err)
		}
		defer f.Close()
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[t.GOARCH]
		if f.Machine != want {
			return fmt.Errorf("ELF for %v, want %v", f.Machine, want)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				return errors.New("dynamically linked (it has a program interpreter)")
			}
		}
	case "darwin":
		f, err := macho.Open(file)
		if err != nil {
			return fmt.Errorf("not a Mach-O executable: %v", err)
		}
		defer f.Close()
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[t.GOARCH]
		if f.Cpu != want || f.Type != macho.TypeExec {
			return fmt.Errorf("Mach-O %v for %v, want an executable for %v", f.Type, f.Cpu, want)
		}
	case "windows":
		f, err := pe.Open(file)
		if err != nil {
			return fmt.Errorf("not a PE executable: %v", err)
		}
		defer f.Close()
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[t.GOARCH]
		if f.Machine != want {
			return fmt.Errorf("PE for machine %#x, want %#x", f.Machine, want)
		}
	default:
		return fmt.Errorf("no format check for %s", t.GOOS)
	}
	return nil
}

// checkVersionCommand runs `bin version` and checks that it prints
// version, stamped with -ldflags "-X main.version=...". A command that
// has no version subcommand yet (exit 2, "unknown command") passes with a
// message: the linker ignores -X for a variable that does not exist.
func checkVersionCommand(bin, version string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 2 && strings.Contains(errOut.String(), "unknown command") {
		first, _, _ := strings.Cut(errOut.String(), "\n")
		fmt.Fprintf(stdout, "SKIP: `%s version` answers %q: no version command yet; once there is one, it must print %s\n", filepath.Base(bin), first, version)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s version: %v\nstdout: %s\nstderr: %s", filepath.Base(bin), err, out.Bytes(), errOut.Bytes())
	}
	if !containsWord(out.String(), version) {
		return fmt.Errorf("%s version prints %q, without %s, the version stamped with -X main.version", filepath.Base(bin), out.String(), version)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	fmt.Fprintf(stdout, "$ %s version\n%s\n", filepath.Base(bin), first)
	return nil
}

// containsWord reports whether s contains w, not as part of a longer
// version or word.
func containsWord(s, w string) bool {
	re := regexp.MustCompile(`(^|[^0-9A-Za-z._+-])` + regexp.QuoteMeta(w) + `($|[^0-9A-Za-z._+-]|\.($|[^0-9A-Za-z]))`)
	return re.MatchString(s)
}
