package main

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// firstVersion is the version of the first release, the one the nested
// modules require while CHANGELOG.md records no release.
const firstVersion = "v0.1.0"

var (
	// releaseHeading is a release's heading in CHANGELOG.md:
	// "## [1.2.3] - 2025-01-31".
	releaseHeading = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)\] - (\d{4}-\d{2}-\d{2})$`)
	// anyHeading is any second-level heading with a bracketed name.
	anyHeading = regexp.MustCompile(`^## \[([^\]]*)\]`)
)

// changelogReleases returns the versions of CHANGELOG.md's release
// headings, newest first as written, with a "v" in front, and a problem for
// each heading that is neither "## [Unreleased]" nor a release heading and
// for releases out of order.
func changelogReleases(changelog []byte) (versions, problems []string) {
	for i, line := range strings.Split(string(changelog), "\n") {
		line = strings.TrimRight(line, "\r ")
		m := anyHeading.FindStringSubmatch(line)
		if m == nil || m[1] == "Unreleased" {
			continue
		}
		r := releaseHeading.FindStringSubmatch(line)
		if r == nil || !semver.IsValid("v"+r[1]) {
			problems = append(problems, fmt.Sprintf("CHANGELOG.md:%d: %q is not a release heading of the form \"## [1.2.3] - 2025-01-31\"", i+1, line))
			continue
		}
		v := "v" + r[1]
		if n := len(versions); n > 0 && semver.Compare(versions[n-1], v) <= 0 {
			problems = append(problems, fmt.Sprintf("CHANGELOG.md:%d: release %s is listed below %s: newest first", i+1, v, versions[n-1]))
		}
		versions = append(versions, v)
	}
	return versions, problems
}

// checkModules checks that every module a release publishes can be
// resolved once the release is tagged: the nested modules require the
// core (and each other) at one version, the version of the newest release
// in CHANGELOG.md (firstVersion while there is none), which the release
// procedure tags on the core and on each nested module; they reach the
// checkout through a replace for development; and no go.mod holds a
// directive its users would not get. It returns that version and the
// problems found.
func checkModules(mods []goMod, changelog []byte) (version string, problems []string) {
	mods = append([]goMod(nil), mods...)
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })

	dirOf := map[string]string{} // published module path -> its directory
	for _, m := range mods {
		if m.Published() {
			dirOf[m.File.Module.Mod.Path] = m.Dir
		}
	}
	if _, ok := dirOf[corePath]; !ok {
		problems = append(problems, "no go.mod at the root declares "+corePath)
	}

	required := map[string][]string{} // version -> "prometheus/go.mod requires ..."
	for _, m := range mods {
		if !m.Published() {
			continue
		}
		name := path.Join(m.Dir, "go.mod")
		want := corePath
		if m.Dir != "" {
			want = corePath + "/" + m.Dir
		}
		if got := m.File.Module.Mod.Path; got != want {
			problems = append(problems, fmt.Sprintf("%s: module %s; a tag %sv1.2.3 serves the directory as %s", name, got, m.TagPrefix(), want))
		}
		if m.Dir == "" {
			// go install .../cmd/sqlelect@version refuses a module whose
			// go.mod has either.
			if len(m.File.Replace) > 0 || len(m.File.Exclude) > 0 {
				problems = append(problems, fmt.Sprintf("%s: replace or exclude directives: `go install %s/cmd/sqlelect@version` refuses them", name, corePath))
			}
			continue
		}

		requiresCore := false
		for _, r := range m.File.Require {
			dir, ours := dirOf[r.Mod.Path]
			if !ours {
				continue
			}
			requiresCore = requiresCore || r.Mod.Path == corePath
			required[r.Mod.Version] = append(required[r.Mod.Version], fmt.Sprintf("%s requires %s %s", name, r.Mod.Path, r.Mod.Version))
			if !hasLocalReplace(m, r.Mod.Path, dir) {
				rel := relPath(m.Dir, dir)
				problems = append(problems, fmt.Sprintf("%s: no `replace %s => %s`: development and CI build it against the checkout", name, r.Mod.Path, rel))
			}
		}
		if !requiresCore {
			problems = append(problems, fmt.Sprintf("%s: does not require %s", name, corePath))
		}
		for _, rep := range m.File.Replace {
			if _, ours := dirOf[rep.Old.Path]; !ours {
				problems = append(problems, fmt.Sprintf("%s: replace of %s: replace applies only when the module is the main module, so its users would not get it; require the version instead", name, rep.Old.Path))
			}
		}
	}

	var versions []string
	for v := range required {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	switch {
	case len(versions) == 0:
		return "", problems
	case len(versions) > 1:
		var lines []string
		for _, v := range versions {
			lines = append(lines, required[v]...)
		}
		problems = append(problems, "the nested modules require different versions of this repository's modules; a release tags all at one version:\n\t"+strings.Join(lines, "\n\t"))
		return "", problems
	}
	version = versions[0]
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		problems = append(problems, fmt.Sprintf("%s is not a release version (vMAJOR.MINOR.PATCH): %s", version, strings.Join(required[version], "; ")))
		return version, problems
	}
	if err := module.CheckPathMajor(version, ""); err != nil {
		problems = append(problems, fmt.Sprintf("%s: from v2 on the module paths end in /%s (%v)", version, semver.Major(version), err))
	}

	releases, cproblems := changelogReleases(changelog)
	problems = append(problems, cproblems...)
	if len(releases) == 0 {
		if version != firstVersion {
			problems = append(problems, fmt.Sprintf("the nested modules require %s, but CHANGELOG.md records no release yet and the first release is %s", version, firstVersion))
		}
	} else if version != releases[0] {
		problems = append(problems, fmt.Sprintf("the nested modules require %s, but the newest release in CHANGELOG.md is %s: `go -C internal/release run . prepare vX.Y.Z` sets both (docs/releasing.md)", version, releases[0]))
	}
	return version, problems
}

// hasLocalReplace reports whether m replaces modPath, every version of
// it, by the directory dir of the repository.
func hasLocalReplace(m goMod, modPath, dir string) bool {
	for _, rep := range m.File.Replace {
		if rep.Old.Path != modPath || rep.Old.Version != "" || rep.New.Version != "" {
			continue
		}
		if path.Join(m.Dir, rep.New.Path) == path.Join(dir, ".") {
			return true
		}
	}
	return false
}

// relPath is the relative path from directory from to directory to, both
// slash-separated and relative to the root.
func relPath(from, to string) string {
	up := strings.Repeat("../", strings.Count(from, "/")+1)
	if to == "" {
		return strings.TrimSuffix(up, "/")
	}
	return up + to
}
