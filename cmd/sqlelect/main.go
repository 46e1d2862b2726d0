// Command sqlelect operates the elections in a database: it creates the
// tables, shows every namespace's leader, candidates and history, follows
// leadership changes as they happen, and lets an operator vacate a seat.
//
//	go install github.com/sqlelect/sqlelect/cmd/sqlelect@latest
//	export SQLELECT_DSN='postgres://app@db:5432/app'
//	sqlelect migrate up
//	sqlelect status
//	sqlelect watch
//	sqlelect resign scheduler
//	sqlelect version
//
// The database comes from --dsn or SQLELECT_DSN, in any form session.Open
// accepts. Every read command takes --json (one JSON object per line; each
// command's help lists its fields). Times are shown in the local time zone
// (JSON: RFC 3339 in UTC). Exit codes: 0 success, 1 an error (also: status
// --require-leader and a namespace without a leader; resign not confirmed,
// or the seat moved on before it was vacated), 2 a usage error.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is the release this binary was built as, stamped by release
// builds with -ldflags "-X main.version=v1.2.3". When empty, `sqlelect
// version` reports the module version from the build information (a
// version for `go install ...@v1.2.3`, "(devel)" for a build in a
// checkout).
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// env is the command's environment: its streams and variables.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// run is the command: args without the program name. It returns the exit
// code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	e := env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "migrate":
		return e.migrate(ctx, rest)
	case "status":
		return e.status(ctx, rest)
	case "candidates":
		return e.candidates(ctx, rest)
	case "history":
		return e.history(ctx, rest)
	case "watch":
		return e.watch(ctx, rest)
	case "resign":
		return e.resign(ctx, rest)
	case "dashboard":
		return e.dashboard(ctx, rest)
	case "version":
		return e.version(rest)
	case "--version", "-version":
		return e.version(rest)
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			return run(ctx, []string{rest[0], "--help"}, stdin, stdout, stderr, getenv)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "sqlelect: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

const usage = `sqlelect operates the leader elections in a database.

Usage:
  sqlelect <command> [flags] [arguments]

Commands:
  migrate up|status|sql      create the election tables, show their version, print their SQL
  status [namespace...]      each namespace's leader, term, lease left and live candidates, and a summary
  candidates [namespace...]  the live candidates of each namespace
  history NAMESPACE          the recent terms of a namespace, newest first
  watch [namespace...]       print when seats are vacated and taken, and candidates joining and leaving
  resign NAMESPACE           end the leader's term, once confirmed; another live candidate takes the seat
  dashboard                  serve a live web page of every namespace (--listen 127.0.0.1:8080)
  version                    the version of this binary, its source revision and Go version (also --version)

The database comes from --dsn or $SQLELECT_DSN (postgres://..., mysql://...,
sqlite:PATH, or any other form session.Open accepts). Read commands take
--json: one JSON object per line. Times are in the local time zone (JSON:
RFC 3339, UTC). status and candidates take filters (--unled, --leader,
--match). A namespace named on the command line must exist (exit 1 "no such
namespace", with the closest names) unless --allow-unknown. Read commands
open an existing database only: a SQLite path that does not exist is an
error, and only "migrate up" creates one. Run "sqlelect help <command>" for
its flags, JSON fields and an example.

Exit codes: 0 success; 1 error (also: status --require-leader and a namespace
without a leader; resign not confirmed, or the seat moved on); 2 usage.
`
