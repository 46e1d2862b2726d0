package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// corePath is the core module's path; every published module of the
// repository is corePath or corePath/<dir>.
const corePath = "github.com/sqlelect/sqlelect"

// repo is a checkout of the repository.
type repo struct {
	root string // absolute path of the directory holding the core go.mod
}

// findRepo walks up from dir to the directory whose go.mod declares
// corePath.
func findRepo(dir string) (repo, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return repo{}, err
	}
	for d := dir; ; {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && modfile.ModulePath(data) == corePath {
			return repo{root: d}, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return repo{}, fmt.Errorf("no directory above %s has the go.mod of %s", dir, corePath)
		}
		d = parent
	}
}

// git runs git in the repository and returns its standard output; the
// error carries its standard error.
func (r repo) git(args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = r.root
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// goMod is one go.mod of the repository.
type goMod struct {
	Dir  string // slash-separated, relative to the root; "" for the core
	Data []byte
	File *modfile.File
}

// Published reports whether the module is one that a release tags: the
// core and every nested module outside internal/ and testdata/.
func (m goMod) Published() bool { return published(m.Dir) }

// TagPrefix is what a release tag of the module starts with: "" for the
// core (v1.2.3), "prometheus/" for a nested one (prometheus/v1.2.3).
func (m goMod) TagPrefix() string {
	if m.Dir == "" {
		return ""
	}
	return m.Dir + "/"
}

// published reports whether a module in directory dir (slash-separated,
// relative to the root) is published.
func published(dir string) bool {
	if dir == "" {
		return true
	}
	for _, elem := range strings.Split(dir, "/") {
		if elem == "internal" || elem == "testdata" || elem == "vendor" ||
			strings.HasPrefix(elem, ".") || strings.HasPrefix(elem, "_") {
			return false
		}
	}
	return true
}

// goModPaths picks the go.mod files out of a list of slash-separated paths.
func goModPaths(names []string) []string {
	var out []string
	for _, n := range names {
		if path.Base(n) == "go.mod" {
			out = append(out, n)
		}
	}
	return out
}

// parseGoMod parses the go.mod at name (slash-separated, relative to the
// root).
func parseGoMod(name string, data []byte) (goMod, error) {
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return goMod{}, err
	}
	if f.Module == nil {
		return goMod{}, fmt.Errorf("%s: no module line", name)
	}
	dir := path.Dir(name)
	if dir == "." {
		dir = ""
	}
	return goMod{Dir: dir, Data: data, File: f}, nil
}

// workingModules reads the go.mod files git tracks, as they are in the
// working tree.
func (r repo) workingModules() ([]goMod, error) {
	out, err := r.git("ls-files", "-z")
	if err != nil {
		return nil, err
	}
	var mods []goMod
	for _, name := range goModPaths(splitZ(out)) {
		data, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(name)))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return nil, err
		}
		m, err := parseGoMod(name, data)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// modulesAt reads the go.mod files of commit rev.
func (r repo) modulesAt(rev string) ([]goMod, error) {
	out, err := r.git("ls-tree", "-r", "-z", "--name-only", rev)
	if err != nil {
		return nil, err
	}
	var mods []goMod
	for _, name := range goModPaths(splitZ(out)) {
		data, err := r.git("show", rev+":"+name)
		if err != nil {
			return nil, err
		}
		m, err := parseGoMod(name, data)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	return mods, nil
}

func splitZ(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
