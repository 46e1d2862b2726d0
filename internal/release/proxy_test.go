package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// newRepo makes a git repository in a temporary directory with files,
// committed, and returns it.
func newRepo(t *testing.T, files map[string]string) repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: ", err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, files)
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "first")
	return repo{root: dir}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// miniRepo is a repository of the same shape as ours: a core module, a
// nested module that uses it, an unpublished module under internal/.
func miniRepo(t *testing.T, nestedRequires string) repo {
	t.Helper()
	return newRepo(t, map[string]string{
		"go.mod":         "module github.com/sqlelect/sqlelect\n\ngo 1.23\n",
		"LICENSE":        "the license\n",
		"CHANGELOG.md":   noRelease,
		".gitignore":     "/ignored.txt\n",
		"greet/greet.go": "package greet\n\n// Hello greets.\nfunc Hello() string { return \"hello from the core\" }\n",
		"prometheus/go.mod": "module github.com/sqlelect/sqlelect/prometheus\n\ngo 1.23\n\nrequire github.com/sqlelect/sqlelect " + nestedRequires +
			"\n\nreplace github.com/sqlelect/sqlelect => ../\n",
		"prometheus/p.go":        "package prometheus\n\nimport \"github.com/sqlelect/sqlelect/greet\"\n\n// Hello greets too.\nfunc Hello() string { return greet.Hello() + \" through prometheus\" }\n",
		"internal/tool/go.mod":   "module github.com/sqlelect/sqlelect/internal/tool\n\ngo 1.23\n",
		"internal/tool/main.go":  "package main\n\nfunc main() {}\n",
		"internal/shared/doc.go": "// Package shared is internal to the core.\npackage shared\n",
	})
}

func zipNames(t *testing.T, file string) []string {
	t.Helper()
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}

// TestBuildProxy: the file proxy serves the core and the nested module
// (not the internal one) at the version, with what git holds at the
// commit; a module outside the repository gets the nested module through
// it alone, no replace, no workspace, and runs code of both.
func TestBuildProxy(t *testing.T) {
	r := miniRepo(t, "v0.1.0")
	writeFiles(t, r.root, map[string]string{"ignored.txt": "x", "untracked.go": "package x\n", "greet/greet.go": "package greet // changed, not committed\n"})
	dir := t.TempDir()
	mods, err := buildProxy(r, "HEAD", "v0.1.0", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Path != corePath || mods[1].Path != corePath+"/prometheus" {
		t.Fatalf("served %+v, want the core and prometheus", mods)
	}
	const pre = "github.com/sqlelect/sqlelect"
	if got, want := strings.Join(zipNames(t, mods[0].Zip), " "),
		pre+"@v0.1.0/.gitignore "+pre+"@v0.1.0/CHANGELOG.md "+pre+"@v0.1.0/LICENSE "+pre+"@v0.1.0/go.mod "+pre+"@v0.1.0/greet/greet.go "+pre+"@v0.1.0/internal/shared/doc.go"; got != want {
		t.Errorf("core zip:\n%s\nwant\n%s", got, want)
	}
	if got, want := strings.Join(zipNames(t, mods[1].Zip), " "),
		pre+"/prometheus@v0.1.0/LICENSE "+pre+"/prometheus@v0.1.0/go.mod "+pre+"/prometheus@v0.1.0/p.go"; got != want {
		t.Errorf("prometheus zip:\n%s\nwant\n%s", got, want)
	}
	for _, f := range []string{"github.com/sqlelect/sqlelect/@v/list", "github.com/sqlelect/sqlelect/prometheus/@v/list"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != "v0.1.0\n" {
			t.Errorf("%s: %q, %v", f, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "github.com/sqlelect/sqlelect/internal")); !os.IsNotExist(err) {
		t.Errorf("the internal module is served: %v", err)
	}

	// Outside: the nested module alone, through the file proxy alone.
	work := t.TempDir()
	writeFiles(t, work, map[string]string{
		"go.mod":  "module example.com/user\n\ngo 1.23\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/sqlelect/sqlelect/prometheus\"\n)\n\nfunc main() { fmt.Println(prometheus.Hello()) }\n",
	})
	env := scratchEnv(proxyURL(dir), t.TempDir())
	goIn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	goIn("get", corePath+"/prometheus@v0.1.0")
	if out := goIn("run", "."); out != "hello from the core through prometheus\n" {
		t.Errorf("go run: %q", out)
	}
	data, err := os.ReadFile(filepath.Join(work, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkOutsideModule(work, mods[1:]); err != nil {
		t.Error(err)
	}
	if len(f.Replace) != 0 {
		t.Errorf("go.mod has replace directives:\n%s", data)
	}
	// A zip other than the one served does not pass for it.
	other := mods[1]
	other.Zip = mods[0].Zip
	if err := checkOutsideModule(work, []served{other}); err == nil || !strings.Contains(err.Error(), "did not come from the file proxy") {
		t.Errorf("checkOutsideModule with another zip: %v", err)
	}
}

// TestScratchModCacheReused: the scratch module's module cache is emptied
// and filled again at the same path from run to run, with the build cache
// kept. A commit that adds a file to a package, released at the same
// version as the run before it, builds: the go command reads the files
// there now, not a list it kept from the earlier commit.
func TestScratchModCacheReused(t *testing.T) {
	r := miniRepo(t, "v0.1.0")
	modcache := filepath.Join(t.TempDir(), "modcache")
	work := t.TempDir()
	writeFiles(t, work, map[string]string{
		"go.mod":  "module example.com/user\n\ngo 1.23\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/sqlelect/sqlelect/prometheus\"\n)\n\nfunc main() { fmt.Println(prometheus.Hello()) }\n",
	})
	run := func(want string) {
		t.Helper()
		dir := t.TempDir()
		if _, err := buildProxy(r, "HEAD", "v0.1.0", dir); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(modcache); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(work, "go.sum"))
		env := scratchEnv(proxyURL(dir), modcache)
		for _, args := range [][]string{{"get", corePath + "/prometheus@v0.1.0"}, {"run", "."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir, cmd.Env = work, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go %v: %v\n%s", args, err, out)
			}
			if args[0] == "run" && string(out) != want {
				t.Errorf("go run: %q, want %q", out, want)
			}
		}
	}
	run("hello from the core through prometheus\n")
	writeFiles(t, r.root, map[string]string{
		"greet/greet.go": "package greet\n\n// Hello greets.\nfunc Hello() string { return word() + \" from the core\" }\n",
		"greet/word.go":  "package greet\n\nfunc word() string { return \"hi\" }\n",
	})
	gitIn(t, r.root, "add", "-A")
	gitIn(t, r.root, "commit", "-q", "-m", "second")
	run("hi from the core through prometheus\n")
	os.RemoveAll(modcache) // -modcacherw: the test's temporary directory can go
}

// TestBuildProxyRefusesOtherVersions: a nested module that requires the
// core at another version than the one being released is refused, since
// its users would need a version that the release does not tag.
func TestBuildProxyRefusesOtherVersions(t *testing.T) {
	r := miniRepo(t, "v0.0.0")
	_, err := buildProxy(r, "HEAD", "v0.1.0", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "requires github.com/sqlelect/sqlelect v0.0.0, not v0.1.0") {
		t.Fatalf("buildProxy: %v", err)
	}
	if _, err := buildProxy(r, "HEAD", "0.1", t.TempDir()); err == nil {
		t.Fatal("buildProxy took version 0.1")
	}
}

// TestPrepare: prepare moves the Unreleased section under the new
// version and sets the nested modules' requirements, after which the check
// passes; it refuses a version that is not newer and an empty section,
// and then changes nothing.
func TestPrepare(t *testing.T) {
	r := miniRepo(t, "v0.1.0")
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := prepare(r, "v0.1.0", day); err != nil {
		t.Fatal(err)
	}
	changelog, _ := os.ReadFile(filepath.Join(r.root, "CHANGELOG.md"))
	if want := "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-12-01\n\n### Added\n\n- Something.\n"; string(changelog) != want {
		t.Errorf("CHANGELOG.md:\n%s\nwant\n%s", changelog, want)
	}
	checkRepo := func(want string) {
		t.Helper()
		mods, err := r.workingModules()
		if err != nil {
			t.Fatal(err)
		}
		changelog, _ := os.ReadFile(filepath.Join(r.root, "CHANGELOG.md"))
		v, problems := checkModules(mods, changelog)
		if v != want || len(problems) > 0 {
			t.Fatalf("check: %s, %v; want %s", v, problems, want)
		}
	}
	checkRepo("v0.1.0")

	writeFiles(t, r.root, map[string]string{"CHANGELOG.md": strings.Replace(string(changelog), "## [Unreleased]\n", "## [Unreleased]\n\n### Fixed\n\n- A bug.\n", 1)})
	if err := prepare(r, "v0.1.1", day.AddDate(0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	checkRepo("v0.1.1")
	gomod, _ := os.ReadFile(filepath.Join(r.root, "prometheus/go.mod"))
	if !strings.Contains(string(gomod), "require github.com/sqlelect/sqlelect v0.1.1\n") || !strings.Contains(string(gomod), "replace github.com/sqlelect/sqlelect => ../\n") {
		t.Errorf("prometheus/go.mod:\n%s", gomod)
	}

	before := snapshot(t, r.root)
	for v, want := range map[string]string{
		"v0.1.0": "not newer than v0.1.1",
		"v0.2.0": "nothing under",
		"v3.0.0": "from v2 on",
	} {
		if err := prepare(r, v, day); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("prepare %s: %v, want %q", v, err, want)
		}
	}
	if after := snapshot(t, r.root); after != before {
		t.Error("a refused prepare changed files")
	}
}

func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"CHANGELOG.md", "prometheus/go.mod"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
