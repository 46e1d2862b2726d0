package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// prepare makes the changes of the release commit of version: the
// Unreleased section of CHANGELOG.md becomes the section of version, dated
// date, under a new empty Unreleased heading, and every published nested
// module requires this repository's modules at version. It writes nothing
// unless every change can be made.
func prepare(r repo, version string, date time.Time) error {
	if err := checkReleaseVersion(version); err != nil {
		return err
	}
	changelogPath := filepath.Join(r.root, "CHANGELOG.md")
	changelog, err := os.ReadFile(changelogPath)
	if err != nil {
		return err
	}
	releases, problems := changelogReleases(changelog)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	if len(releases) > 0 && semver.Compare(version, releases[0]) <= 0 {
		return fmt.Errorf("%s is not newer than %s, the newest release in CHANGELOG.md", version, releases[0])
	}
	newChangelog, err := releaseChangelog(changelog, version, date)
	if err != nil {
		return err
	}

	mods, err := r.workingModules()
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	for _, m := range mods {
		if m.Published() {
			ours[m.File.Module.Mod.Path] = true
		}
	}
	writes := map[string][]byte{changelogPath: newChangelog}
	for _, m := range mods {
		if !m.Published() || m.Dir == "" {
			continue
		}
		for _, req := range m.File.Require {
			if ours[req.Mod.Path] {
				if err := m.File.AddRequire(req.Mod.Path, version); err != nil {
					return err
				}
			}
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return err
		}
		writes[filepath.Join(r.root, filepath.FromSlash(path.Join(m.Dir, "go.mod")))] = data
	}
	for name, data := range writes {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkReleaseVersion returns an error unless version can be tagged on
// every module of the repository: vMAJOR.MINOR.PATCH (a pre-release suffix
// allowed), below v2 as long as the module paths have no /vN.
func checkReleaseVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("%q is not a release version: vMAJOR.MINOR.PATCH, such as v0.2.0 or v1.0.0-rc.1", version)
	}
	if err := module.CheckPathMajor(version, ""); err != nil {
		return fmt.Errorf("%s: from v2 on every module path ends in /%s: %v", version, semver.Major(version), err)
	}
	return nil
}

// releaseChangelog turns the Unreleased section of changelog into the
// section of version, dated date, under a new empty Unreleased heading.
func releaseChangelog(changelog []byte, version string, date time.Time) ([]byte, error) {
	lines := strings.Split(string(changelog), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\r ") == "## [Unreleased]" {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, errors.New("CHANGELOG.md has no \"## [Unreleased]\" heading")
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	if strings.TrimSpace(strings.Join(lines[start+1:end], "\n")) == "" {
		return nil, errors.New("CHANGELOG.md: nothing under \"## [Unreleased]\" to release")
	}
	heading := fmt.Sprintf("## [%s] - %s", strings.TrimPrefix(version, "v"), date.UTC().Format("2006-01-02"))
	out := append([]string{}, lines[:start+1]...)
	out = append(out, "", heading)
	out = append(out, lines[start+1:]...)
	return []byte(strings.Join(out, "\n")), nil
}
