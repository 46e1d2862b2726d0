package main

import (
	"strings"
	"testing"
)

func mustMod(t *testing.T, name, text string) goMod {
	t.Helper()
	m, err := parseGoMod(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const coreMod = "module github.com/sqlelect/sqlelect\n\ngo 1.23\n\nrequire gorm.io/gorm v1.31.0\n"

func nestedMod(dir, version string, extra string) string {
	return "module github.com/sqlelect/sqlelect/" + dir + "\n\ngo 1.23\n\nrequire (\n\tgithub.com/sqlelect/sqlelect " + version +
		"\n\tgorm.io/gorm v1.31.0\n)\n\nreplace github.com/sqlelect/sqlelect => ../\n" + extra
}

const (
	noRelease  = "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- Something.\n"
	twoRelease = "# Changelog\n\n## [Unreleased]\n\n## [0.3.0] - 2026-12-01\n\n- b\n\n## [0.2.0] - 2026-11-01\n\n- a\n"
)

// TestCheckModules: the repository as it should be passes, and each way
// of getting a nested module's requirements wrong is reported.
func TestCheckModules(t *testing.T) {
	tests := []struct {
		name      string
		mods      map[string]string
		changelog string
		version   string
		problem   string // "" for none
	}{
		{
			name: "before the first release",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", ""),
				"gocron/go.mod":     nestedMod("gocron", "v0.1.0", "")},
			changelog: noRelease, version: "v0.1.0",
		},
		{
			name: "the newest release",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.3.0", "")},
			changelog: twoRelease, version: "v0.3.0",
		},
		{
			name: "a version that will never exist",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.0.0", "")},
			changelog: noRelease, version: "v0.0.0", problem: "the first release is v0.1.0",
		},
		{
			name: "an older release",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.2.0", "")},
			changelog: twoRelease, version: "v0.2.0", problem: "the newest release in CHANGELOG.md is v0.3.0",
		},
		{
			name: "two versions",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.3.0", ""),
				"gocron/go.mod":     nestedMod("gocron", "v0.2.0", "")},
			changelog: twoRelease, problem: "require different versions",
		},
		{
			name: "a pseudo-version",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.3.1-0.20261201000000-abcdefabcdef", "")},
			changelog: twoRelease, version: "v0.3.1-0.20261201000000-abcdefabcdef", problem: "the newest release in CHANGELOG.md is v0.3.0",
		},
		{
			name: "no replace for development",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": strings.Replace(nestedMod("prometheus", "v0.1.0", ""), "replace github.com/sqlelect/sqlelect => ../\n", "", 1)},
			changelog: noRelease, version: "v0.1.0", problem: "no `replace github.com/sqlelect/sqlelect => ..`",
		},
		{
			name: "a replace pointing elsewhere",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": strings.Replace(nestedMod("prometheus", "v0.1.0", ""), "=> ../", "=> ../../fork", 1)},
			changelog: noRelease, version: "v0.1.0", problem: "no `replace github.com/sqlelect/sqlelect => ..`",
		},
		{
			name: "a replace its users would not get",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", "replace gorm.io/gorm => gorm.io/gorm v1.30.0\n")},
			changelog: noRelease, version: "v0.1.0", problem: "replace of gorm.io/gorm",
		},
		{
			name: "a replace in the core",
			mods: map[string]string{"go.mod": coreMod + "replace gorm.io/gorm => ../gorm\n",
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", "")},
			changelog: noRelease, version: "v0.1.0", problem: "refuses them",
		},
		{
			name: "no requirement of the core",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", ""),
				"gocron/go.mod":     "module github.com/sqlelect/sqlelect/gocron\n\ngo 1.23\n"},
			changelog: noRelease, version: "v0.1.0", problem: "gocron/go.mod: does not require",
		},
		{
			name: "a module path that its tags do not serve",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": strings.Replace(nestedMod("prometheus", "v0.1.0", ""), "sqlelect/prometheus", "sqlelect/metrics", 1)},
			changelog: noRelease, version: "v0.1.0", problem: "a tag prometheus/v1.2.3 serves the directory as github.com/sqlelect/sqlelect/prometheus",
		},
		{
			name: "a nested module requiring another at the same version",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", ""),
				"gocron/go.mod": nestedMod("gocron", "v0.1.0", "") +
					"require github.com/sqlelect/sqlelect/prometheus v0.1.0\n\nreplace github.com/sqlelect/sqlelect/prometheus => ../prometheus\n"},
			changelog: noRelease, version: "v0.1.0",
		},
		{
			name: "a nested module requiring another at another version",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.1.0", ""),
				"gocron/go.mod": nestedMod("gocron", "v0.1.0", "") +
					"require github.com/sqlelect/sqlelect/prometheus v0.0.1\n\nreplace github.com/sqlelect/sqlelect/prometheus => ../prometheus\n"},
			changelog: noRelease, problem: "gocron/go.mod requires github.com/sqlelect/sqlelect/prometheus v0.0.1",
		},
		{
			name: "internal modules are not published",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod":       nestedMod("prometheus", "v0.1.0", ""),
				"internal/release/go.mod": "module github.com/sqlelect/sqlelect/internal/release\n\ngo 1.23\n\nrequire golang.org/x/mod v0.26.0\n"},
			changelog: noRelease, version: "v0.1.0",
		},
		{
			name: "a malformed release heading",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.3.0", "")},
			changelog: "## [Unreleased]\n\n## [0.3.0]\n\n## [0.2.0] - 2026-11-01\n", version: "v0.3.0", problem: "is not a release heading",
		},
		{
			name: "releases out of order",
			mods: map[string]string{"go.mod": coreMod,
				"prometheus/go.mod": nestedMod("prometheus", "v0.2.0", "")},
			changelog: "## [Unreleased]\n\n## [0.2.0] - 2026-11-01\n\n## [0.3.0] - 2026-12-01\n", version: "v0.2.0", problem: "newest first",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []goMod
			for name, text := range tt.mods {
				mods = append(mods, mustMod(t, name, text))
			}
			version, problems := checkModules(mods, []byte(tt.changelog))
			if tt.version != "" && version != tt.version {
				t.Errorf("version %q, want %q", version, tt.version)
			}
			all := strings.Join(problems, "\n")
			switch {
			case tt.problem == "" && len(problems) > 0:
				t.Errorf("problems:\n%s", all)
			case tt.problem != "" && !strings.Contains(all, tt.problem):
				t.Errorf("problems:\n%s\nwant one containing %q", all, tt.problem)
			}
		})
	}
}

func TestChangelogReleases(t *testing.T) {
	versions, problems := changelogReleases([]byte(twoRelease))
	if len(problems) > 0 || strings.Join(versions, " ") != "v0.3.0 v0.2.0" {
		t.Fatalf("versions %v, problems %v", versions, problems)
	}
	versions, problems = changelogReleases([]byte("## [Unreleased]\n\n## [1.0.0-rc.1] - 2027-01-01\n"))
	if len(problems) > 0 || strings.Join(versions, " ") != "v1.0.0-rc.1" {
		t.Fatalf("versions %v, problems %v", versions, problems)
	}
}

func TestCheckReleaseVersion(t *testing.T) {
	for v, want := range map[string]string{
		"v0.1.0": "", "v1.2.3": "", "v1.0.0-rc.1": "",
		"0.1.0": "not a release version", "v0.1": "not a release version", "v1.2.3+meta": "not a release version",
		"v2.0.0": "from v2 on",
	} {
		err := checkReleaseVersion(v)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("checkReleaseVersion(%q) = %v, want %q", v, err, want)
		}
	}
}

func TestPublished(t *testing.T) {
	for dir, want := range map[string]bool{
		"": true, "prometheus": true, "contrib/x": true,
		"internal/release": false, "a/internal": false, "x/testdata/y": false, "_old": false, ".hidden": false,
	} {
		if got := published(dir); got != want {
			t.Errorf("published(%q) = %v, want %v", dir, got, want)
		}
	}
}
