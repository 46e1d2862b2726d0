package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// served is one module version a file module proxy serves.
type served struct {
	Path, Version string
	Zip           string // the .zip file in the proxy
}

// buildProxy writes to dir a file module proxy (GOPROXY=file://dir) that
// serves every published module of the repository at version, made from
// commit rev as a module proxy makes it from the tags the release procedure
// pushes there: the .info, .mod and .zip files and the list of each. The
// zips hold what git archive gives for rev (so .gitignore'd and untracked
// files are left out), without the files of nested modules, and a nested
// module without a LICENSE gets the root's, as the go command does. It
// fails if a nested module at rev does not require this repository's
// modules at version, since its users would then need a version that the
// release does not tag.
func buildProxy(r repo, rev, version, dir string) ([]served, error) {
	if err := checkReleaseVersion(version); err != nil {
		return nil, err
	}
	commit, err := r.git("rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	out, err := r.git("log", "-1", "--format=%cI", rev)
	if err != nil {
		return nil, err
	}
	when, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	if err != nil {
		return nil, err
	}
	mods, err := r.modulesAt(rev)
	if err != nil {
		return nil, err
	}
	ours := map[string]bool{}
	for _, m := range mods {
		if m.Published() {
			ours[m.File.Module.Mod.Path] = true
		}
	}
	for _, m := range mods {
		if !m.Published() {
			continue
		}
		for _, req := range m.File.Require {
			if ours[req.Mod.Path] && req.Mod.Version != version {
				return nil, fmt.Errorf("%s/go.mod at %s requires %s %s, not %s, the version being released: its users would need a version that this release does not tag (docs/releasing.md)",
					m.Dir, strings.TrimSpace(string(commit))[:12], req.Mod.Path, req.Mod.Version, version)
			}
		}
	}

	// The whole tree once, as the go command reads it from git.
	archive, err := r.git("-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", rev)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return nil, err
	}

	var result []served
	for _, m := range mods {
		if !m.Published() {
			continue
		}
		mv := module.Version{Path: m.File.Module.Mod.Path, Version: version}
		files := moduleFiles(zr, m.Dir)
		var buf bytes.Buffer
		if err := modzip.Create(&buf, mv, files); err != nil {
			return nil, fmt.Errorf("zip of %s: %w", mv, err)
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, when.UTC()})
		if err != nil {
			return nil, err
		}
		s, err := writeProxyVersion(dir, mv, info, m.Data, buf.Bytes())
		if err != nil {
			return nil, err
		}
		if _, err := modzip.CheckZip(mv, s.Zip); err != nil {
			return nil, fmt.Errorf("the zip of %s does not pass the go command's checks: %w", mv, err)
		}
		result = append(result, s)
	}
	return result, nil
}

// moduleFiles returns the files of the archive under dir ("" for the
// root), named relative to it, with the root's LICENSE added to a nested
// module that has none.
func moduleFiles(zr *zip.Reader, dir string) []modzip.File {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	var files []modzip.File
	var license *zip.File
	haveLicense := false
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		if f.Name == "LICENSE" {
			license = f
		}
		if !strings.HasPrefix(f.Name, prefix) {
			continue
		}
		name := strings.TrimPrefix(f.Name, prefix)
		haveLicense = haveLicense || name == "LICENSE"
		files = append(files, archiveFile{name: name, f: f})
	}
	if dir != "" && !haveLicense && license != nil {
		files = append(files, archiveFile{name: "LICENSE", f: license})
	}
	return files
}

// archiveFile is a file of git's zip archive as a module zip file.
type archiveFile struct {
	name string
	f    *zip.File
}

func (a archiveFile) Path() string                 { return a.name }
func (a archiveFile) Lstat() (os.FileInfo, error)  { return a.f.FileInfo(), nil }
func (a archiveFile) Open() (io.ReadCloser, error) { return a.f.Open() }

// writeProxyVersion writes the files of module version mv into the file
// proxy at dir and adds the version to the module's list.
func writeProxyVersion(dir string, mv module.Version, info, mod, zipData []byte) (served, error) {
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return served{}, err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return served{}, err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return served{}, err
	}
	base := filepath.Join(vdir, escVersion)
	for ext, data := range map[string][]byte{".info": info, ".mod": mod, ".zip": zipData} {
		if err := os.WriteFile(base+ext, data, 0o644); err != nil {
			return served{}, err
		}
	}
	listPath := filepath.Join(vdir, "list")
	old, err := os.ReadFile(listPath)
	if err != nil && !os.IsNotExist(err) {
		return served{}, err
	}
	versions := strings.Fields(string(old))
	found := false
	for _, v := range versions {
		found = found || v == mv.Version
	}
	if !found {
		versions = append(versions, mv.Version)
	}
	semver.Sort(versions)
	if err := os.WriteFile(listPath, []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return served{}, err
	}
	return served{Path: mv.Path, Version: mv.Version, Zip: base + ".zip"}, nil
}

// proxyURL is the GOPROXY entry of the file proxy at dir.
func proxyURL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // file:///C:/... on Windows
	}
	return "file://" + path.Clean(p)
}
