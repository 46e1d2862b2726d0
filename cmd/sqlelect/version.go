package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// buildInfo is what `sqlelect version` reports, and its JSON form.
type buildInfo struct {
	// Version is the release (main.version when a release build stamped
	// it, else the module version of the build information).
	Version string `json:"version"`
	// Module is the main module's path.
	Module string `json:"module"`
	// Revision, Time and Modified describe the source it was built from,
	// as the Go toolchain recorded it from version control: empty and
	// false when it recorded nothing (a build outside a checkout, or with
	// -buildvcs=false).
	Revision string `json:"revision"`
	Time     string `json:"time"`
	Modified bool   `json:"modified"`
	// Go is the Go release it was built with; Platform its GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// readBuildInfo gathers the binary's build information, with stamped (the
// main.version variable) in place of the module version when set.
func readBuildInfo(stamped string) buildInfo {
	b := buildInfo{Version: stamped, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "(unknown)"
		}
		return b
	}
	b.Module, b.Go = bi.Main.Path, bi.GoVersion
	if b.Version == "" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func (e env) version(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	asJSON := fs.Bool("json", false, "one JSON object (fields: version, module, revision, time, modified, go, platform)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, "Usage: sqlelect version [--json]\n\n"+
			"Prints the version of this binary (the release it was stamped with, else the module version: \"(devel)\"\n"+
			"for a build in a checkout), the source revision and its time, whether the checkout had uncommitted\n"+
			"changes, and the Go release and platform it was built with. It needs no database. `sqlelect --version`\n"+
			"prints the same.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(w, "\nExample:\n  sqlelect version\n")
	}
	pos, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(fs, "version takes no arguments")
	}
	b := readBuildInfo(version)
	if *asJSON {
		return e.writeOrFail(b)
	}
	fmt.Fprintf(e.stdout, "sqlelect %s\n", b.Version)
	if b.Module != "" {
		fmt.Fprintf(e.stdout, "  module:   %s\n", b.Module)
	}
	switch {
	case b.Revision == "":
		fmt.Fprintln(e.stdout, "  revision: (not recorded: built outside a checkout, or with -buildvcs=false)")
	case b.Modified:
		fmt.Fprintf(e.stdout, "  revision: %s (modified)\n", b.Revision)
	default:
		fmt.Fprintf(e.stdout, "  revision: %s\n", b.Revision)
	}
	if b.Time != "" {
		fmt.Fprintf(e.stdout, "  time:     %s\n", b.Time)
	}
	fmt.Fprintf(e.stdout, "  go:       %s %s\n", b.Go, b.Platform)
	return exitOK
}
