package main

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// reproduce builds the linux/amd64 binary of release version again with
// `make release`, from a fresh clone of HEAD at another path, and checks
// that it has the bytes that dir/SHA256SUMS lists. That needs dir to have
// been built from a clean clone at HEAD (the binary's build information
// says so: vcs.revision HEAD, vcs.modified false), as CI's is; otherwise
// (a tree with local changes, a git worktree, whose builds carry no VCS
// stamp) it builds from two clones at different paths and compares those,
// which CI=true refuses.
func reproduce(r repo, version, dir string, stdout io.Writer) error {
	t := target{"linux", "amd64"}
	name := binaryName(version, t)
	data, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		return err
	}
	sums, err := parseSums(data)
	if err != nil {
		return err
	}
	listed, ok := sums[name]
	if !ok {
		return fmt.Errorf("%s does not list %s", sumsFile, name)
	}
	out, err := r.git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	head := strings.TrimSpace(string(out))
	bi, err := buildinfo.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	fromHead := settings["vcs.revision"] == head && settings["vcs.modified"] == "false"

	tmp, err := os.MkdirTemp("", "sqlelect-reproduce-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	build := func(sub string) (string, error) {
		start := time.Now()
		src := filepath.Join(tmp, sub, "sqlelect")
		if _, err := r.git("clone", "-q", "--no-checkout", r.root, src); err != nil {
			return "", err
		}
		clone := repo{root: src}
		if _, err := clone.git("checkout", "-q", "--detach", head); err != nil {
			return "", err
		}
		out := filepath.Join(tmp, sub, "dist")
		cmd := exec.Command("make", "-C", src, "release", "VERSION="+version, "PLATFORMS="+t.GOOS+"/"+t.GOARCH, "DIST="+out)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("make release in a clone: %v\n%s", err, b)
		}
		sum, err := fileSHA256(filepath.Join(out, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(stdout, "%s  %s from a clone at %s (%v)\n", sum[:12], name, src, time.Since(start).Round(time.Millisecond))
		return sum, nil
	}

	if fromHead {
		sum, err := build("a")
		if err != nil {
			return err
		}
		if sum != listed {
			return fmt.Errorf("%s: %s in %s, %s when built again from a clone at another path: the build is not reproducible", name, listed[:12], dir, sum[:12])
		}
		fmt.Fprintf(stdout, "reproduced %s: the same bytes from a fresh clone at another path\n", name)
		return nil
	}
	why := fmt.Sprintf("%s was not built from a clean clone at HEAD (vcs.revision %q, vcs.modified %q; a git worktree stamps neither)", name, settings["vcs.revision"], settings["vcs.modified"])
	if os.Getenv("CI") == "true" {
		return fmt.Errorf("%s: CI builds from a clean clone", why)
	}
	fmt.Fprintf(stdout, "%s: comparing two fresh clones instead\n", why)
	a, err := build("a")
	if err != nil {
		return err
	}
	b, err := build(filepath.Join("elsewhere", "b"))
	if err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("%s: %s and %s from two clones at different paths: the build is not reproducible", name, a[:12], b[:12])
	}
	fmt.Fprintf(stdout, "reproduced %s: the same bytes from two fresh clones at different paths\n", name)
	return nil
}
