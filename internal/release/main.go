// Command release checks and makes what a release of sqlelect publishes:
// the modules (the core and the nested prometheus, gocron and otel
// modules, tagged at one version) and the binaries of the sqlelect
// command. docs/releasing.md is the procedure; the Makefile and .ci/run
// call it. It is a module of its own, so that the core module does not
// depend on golang.org/x/mod. Run it from anywhere in the repository:
//
//	go -C internal/release run . check
//	go -C internal/release run . prepare v0.2.0
//	go -C internal/release run . outside
//	go -C internal/release run . proxy -version v0.2.0 /tmp/proxy
//	go -C internal/release run . sums dist
//	go -C internal/release run . dist -version v0.2.0 dist
//	go -C internal/release run . reproduce -version v0.2.0 dist
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const usage = `usage: go -C internal/release run . <command> [flags]

  check                     the nested modules require this repository's modules at the
                            version of the newest release in CHANGELOG.md, with a replace
                            for development, and no go.mod has directives its users lose
  prepare VERSION           the release commit's changes: CHANGELOG.md's Unreleased section
                            becomes VERSION's, the nested modules require VERSION
  outside [-version V]      build and run, as a user outside the repository would, a scratch
                            module that gets every module at V (default: the version the
                            nested modules require) through a file module proxy made from HEAD
  proxy -version V DIR      write that file module proxy to DIR (GOPROXY=file://DIR)
  sums DIR                  write DIR/SHA256SUMS for DIR's sqlelect_* files
  dist -version V DIR       check the binaries and SHA256SUMS that make release left in DIR
  reproduce -version V DIR  build DIR's linux/amd64 binary again from a fresh clone; same bytes
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line that names no command or lacks what it
// needs.
type usageError string

func (u usageError) Error() string { return string(u) }

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError("no command")
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	r, err := findRepo(wd)
	if err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	version := fs.String("version", "", "the release version")
	rev := fs.String("rev", "HEAD", "the commit to release")
	fallback := fs.String("fallback", "", "what GOPROXY goes on with after the file proxy (default: go env GOPROXY)")
	modcache := fs.String("modcache", "", "GOMODCACHE for the scratch module (default: a new, empty one)")
	keep := fs.Bool("keep", false, "keep the scratch module and the proxy")
	date := fs.String("date", time.Now().UTC().Format("2006-01-02"), "the release date in CHANGELOG.md")
	if err := fs.Parse(args); err != nil {
		return usageError(fmt.Sprintf("%s: %v", cmd, err))
	}
	args = fs.Args()
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(wd, p)
	}
	needVersion := func() error {
		if *version == "" {
			return usageError(cmd + " needs -version")
		}
		return nil
	}
	oneArg := func() error {
		if len(args) != 1 {
			return usageError(cmd + " needs one directory")
		}
		return nil
	}

	switch cmd {
	case "check":
		v, err := check(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "the nested modules require %s at %s, the version the release procedure tags (core first, then prometheus/%s, gocron/%s, otel/%s)\n", corePath, v, v, v, v)
		return nil
	case "prepare":
		if len(args) != 1 {
			return usageError("prepare needs the version")
		}
		d, err := time.Parse("2006-01-02", *date)
		if err != nil {
			return fmt.Errorf("-date: %v", err)
		}
		if err := prepare(r, args[0], d); err != nil {
			return err
		}
		v, err := check(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "CHANGELOG.md and the nested modules' go.mod files now name %s; review, commit, and follow docs/releasing.md\n", v)
		return nil
	case "outside":
		if *version == "" {
			v, err := check(r)
			if err != nil {
				return err
			}
			*version = v
		}
		return outside(r, outsideOptions{Version: *version, Rev: *rev, Fallback: *fallback, ModCache: *modcache, Keep: *keep}, stdout)
	case "proxy":
		if err := errors.Join(needVersion(), oneArg()); err != nil {
			return err
		}
		mods, err := buildProxy(r, *rev, *version, abs(args[0]))
		if err != nil {
			return err
		}
		for _, m := range mods {
			fmt.Fprintf(stdout, "%s %s\n", m.Path, m.Version)
		}
		fmt.Fprintf(stdout, "GOPROXY=%s,... GONOSUMDB=%s\n", proxyURL(abs(args[0])), corePath)
		return nil
	case "sums":
		if err := oneArg(); err != nil {
			return err
		}
		return writeSums(abs(args[0]))
	case "dist":
		if err := errors.Join(needVersion(), oneArg()); err != nil {
			return err
		}
		return checkDist(abs(args[0]), *version, stdout)
	case "reproduce":
		if err := errors.Join(needVersion(), oneArg()); err != nil {
			return err
		}
		return reproduce(r, *version, abs(args[0]), stdout)
	}
	return usageError(fmt.Sprintf("unknown command %q", cmd))
}

// check runs checkModules on the working tree and returns the version the
// nested modules require.
func check(r repo) (string, error) {
	mods, err := r.workingModules()
	if err != nil {
		return "", err
	}
	changelog, err := os.ReadFile(filepath.Join(r.root, "CHANGELOG.md"))
	if err != nil {
		return "", err
	}
	v, problems := checkModules(mods, changelog)
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	if v == "" {
		return "", errors.New("no nested module requires " + corePath)
	}
	return v, nil
}
