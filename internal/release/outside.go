package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/sumdb/dirhash"
)

// outsideMain is the program of the scratch module.
//
//go:embed testdata/outside/main.go
var outsideMain []byte

// outsideOptions says how to build the scratch module.
type outsideOptions struct {
	Version  string // the version being released
	Rev      string // the commit to release
	Fallback string // what GOPROXY goes on with after the file proxy; "" for the go command's GOPROXY
	ModCache string // GOMODCACHE; "" for a new, empty one
	Keep     bool   // keep the temporary directory
}

// outside builds, as a user outside the repository would, a scratch module
// that gets the core module and every nested module at o.Version and
// imports each; then runs it. The modules come from a file module proxy
// made from commit o.Rev by buildProxy, first in GOPROXY; everything else
// from the GOPROXY that follows it. The scratch module has no replace and
// no workspace (GOWORK=off), and the module cache starts empty unless
// o.ModCache names one, so that no copy from an earlier run can stand in
// for the release. Checksums of this repository's modules are not looked
// up in the checksum database (GONOSUMDB), which has never seen them;
// every other module's are.
func outside(r repo, o outsideOptions, stdout io.Writer) error {
	if err := checkReleaseVersion(o.Version); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sqlelect-outside-")
	if err != nil {
		return err
	}
	if o.Keep {
		fmt.Fprintf(stdout, "keeping %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if inside(r.root, tmp) {
		return fmt.Errorf("the temporary directory %s is inside the repository %s: set TMPDIR", tmp, r.root)
	}

	start := time.Now()
	proxyDir := filepath.Join(tmp, "proxy")
	mods, err := buildProxy(r, o.Rev, o.Version, proxyDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "file module proxy %s (%v):\n", proxyDir, time.Since(start).Round(time.Millisecond))
	for _, m := range mods {
		fmt.Fprintf(stdout, "\t%s %s\n", m.Path, m.Version)
	}

	fallback := o.Fallback
	if fallback == "" {
		out, err := exec.Command("go", "env", "GOPROXY").Output()
		if err != nil {
			return fmt.Errorf("go env GOPROXY: %v", err)
		}
		fallback = strings.TrimSpace(string(out))
	}
	for _, p := range strings.FieldsFunc(fallback, func(c rune) bool { return c == ',' || c == '|' }) {
		if p == "off" {
			return fmt.Errorf("GOPROXY %q: the modules this repository depends on must come from a module proxy", fallback)
		}
	}
	modcache := o.ModCache
	if modcache == "" {
		// Empty, at a path that stays the same from run to run: the build
		// cache keys cgo packages (mattn/go-sqlite3) by their directory,
		// and a new path would compile SQLite again each time.
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir := filepath.Join(base, "sqlelect-release")
		unlock, err := lockDir(dir, 15*time.Minute)
		if err != nil {
			return err
		}
		defer unlock()
		modcache = filepath.Join(dir, "modcache")
		if err := os.RemoveAll(modcache); err != nil {
			return err
		}
		if !o.Keep {
			defer os.RemoveAll(modcache)
		}
	}
	env := scratchEnv(proxyURL(proxyDir)+","+fallback, modcache)
	fmt.Fprintf(stdout, "GOPROXY=%s GONOSUMDB=%s GOWORK=off GOMODCACHE=%s GODEBUG=goindex=0\n", proxyURL(proxyDir)+","+fallback, corePath, modcache)

	work := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	newModule := func() error {
		os.Remove(filepath.Join(work, "go.sum"))
		return os.WriteFile(filepath.Join(work, "go.mod"), []byte("module example.com/outside\n\ngo 1.23\n"), 0o644)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goCmd := func(args ...string) error {
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(stdout, "$ go %s (%v)\n", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			noise := strings.HasPrefix(line, "go: downloading ") ||
				strings.HasPrefix(line, "go: added ") && !strings.Contains(line, corePath)
			if err != nil || !noise {
				fmt.Fprintf(stdout, "\t%s\n", line)
			}
		}
		if err != nil {
			return fmt.Errorf("go %s in the scratch module: %v", strings.Join(args, " "), err)
		}
		return nil
	}
	// Each nested module alone first, as `go get .../prometheus` would add
	// it: the core then comes only through the module's own requirement
	// (getting them together, the highest requirement would hide a lower
	// one that does not exist).
	for _, m := range mods {
		if m.Path == corePath {
			continue
		}
		if err := newModule(); err != nil {
			return err
		}
		if err := goCmd("get", m.Path+"@"+m.Version); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", corePath)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("go list -m %s after go get %s: %v", corePath, m.Path, err)
		}
		if got := strings.TrimSpace(string(out)); got != o.Version {
			return fmt.Errorf("go get %s@%s alone selects %s %s, want %s", m.Path, m.Version, corePath, got, o.Version)
		}
		fmt.Fprintf(stdout, "\t%s@%s alone brings %s %s\n", m.Path, m.Version, corePath, o.Version)
	}

	// Then all of them, and the program that imports each.
	if err := newModule(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), outsideMain, 0o644); err != nil {
		return err
	}
	get := []string{"get"}
	for _, m := range mods {
		get = append(get, m.Path+"@"+m.Version)
	}
	if err := goCmd(get...); err != nil {
		return err
	}
	if err := goCmd("mod", "tidy"); err != nil {
		return err
	}
	if err := checkOutsideModule(work, mods); err != nil {
		return err
	}
	exe := "outside"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	if err := goCmd("build", "-trimpath", "-o", exe, "."); err != nil {
		return err
	}

	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	cmd := exec.CommandContext(rctx, filepath.Join(work, exe))
	cmd.Dir = work
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, stdout)
	cmd.Stderr = stdout
	fmt.Fprintf(stdout, "$ ./%s\n", exe)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the scratch program: %v", err)
	}
	for _, want := range []string{"core: ", "prometheus: ", "gocron: ", "otel: "} {
		if !strings.Contains("\n"+out.String(), "\n"+want) {
			return fmt.Errorf("the scratch program printed no %q line", want)
		}
	}
	fmt.Fprintf(stdout, "outside: every module resolved at %s through the file proxy and ran (%v in all)\n", o.Version, time.Since(start).Round(time.Second))
	return nil
}

// checkOutsideModule checks the scratch module after go get and go mod
// tidy: no replace, every served module required at its version, and the
// checksum go.sum recorded for each is the one of the zip the file proxy
// served, so that nothing else stood in for the release.
func checkOutsideModule(work string, mods []served) error {
	data, err := os.ReadFile(filepath.Join(work, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return err
	}
	if len(f.Replace) > 0 {
		return fmt.Errorf("the scratch module's go.mod has replace directives:\n%s", data)
	}
	have := map[string]string{}
	for _, r := range f.Require {
		have[r.Mod.Path] = r.Mod.Version
	}
	sum, err := os.ReadFile(filepath.Join(work, "go.sum"))
	if err != nil {
		return err
	}
	for _, m := range mods {
		if have[m.Path] != m.Version {
			return fmt.Errorf("the scratch module requires %s %q, want %s:\n%s", m.Path, have[m.Path], m.Version, data)
		}
		h, err := dirhash.HashZip(m.Zip, dirhash.Hash1)
		if err != nil {
			return err
		}
		line := m.Path + " " + m.Version + " " + h
		if !bytes.Contains(sum, []byte(line+"\n")) {
			return fmt.Errorf("go.sum has no line %q: the module did not come from the file proxy", line)
		}
	}
	return nil
}

// withEnv returns env with the variables of set replaced or added.
// scratchEnv is the environment of the go commands run in the scratch
// module: the proxy list, no workspace, no private modules, and modcache.
func scratchEnv(proxies, modcache string) []string {
	return withEnv(os.Environ(), map[string]string{
		"GOPROXY":    proxies,
		"GONOSUMDB":  corePath,
		"GONOPROXY":  "",
		"GOPRIVATE":  "",
		"GOFLAGS":    "-modcacherw",
		"GOWORK":     "off",
		"GOMODCACHE": modcache,
		// The go command indexes a directory of the module cache by its
		// path alone, trusting that what is there never changes. Here one
		// path holds this repository's modules at one version made from
		// whatever HEAD is, so an index kept in the build cache by an
		// earlier run lists an earlier commit's files, and a file added
		// since is "undefined". Without the index the files are read.
		"GODEBUG": "goindex=0",
	})
}

func withEnv(env []string, set map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

// lockDir takes the lock of dir, a file that another run holds for at
// most stale, and returns its release.
func lockDir(dir string, stale time.Duration) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := filepath.Join(dir, "lock")
	for try := 0; ; try++ {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			f.Close()
			return func() { os.Remove(name) }, nil
		}
		if !os.IsExist(err) {
			return nil, err
		}
		fi, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		if time.Since(fi.ModTime()) < stale || try > 0 {
			return nil, fmt.Errorf("another run holds %s (since %v): wait for it, or remove the file if none runs", name, fi.ModTime().Format(time.RFC3339))
		}
		os.Remove(name) // left behind by a run that was killed
	}
}

// inside reports whether path is root or below it, symbolic links
// resolved.
func inside(root, path string) bool {
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
