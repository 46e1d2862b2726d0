package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sqlelect/sqlelect/dashboard"
)

func (e env) dashboard(ctx context.Context, args []string) int {
	fs, c := e.flags("dashboard", "",
		"Serves a live web page of every namespace: its leader, lease countdown, candidates and recent terms.\n"+
			"Read-only unless --allow-resign; the page polls api/state, which serves the same data as JSON.",
		"sqlelect dashboard --listen 127.0.0.1:8080", false)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	allowResign := fs.Bool("allow-resign", false, "show a resign button on each led namespace (same-origin POST with a CSRF token)")
	refresh := fs.Duration("refresh", time.Second, "how often the page polls")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return e.usageError(fs, "dashboard takes no arguments")
	}
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	opts := []dashboard.Option{dashboard.WithRefresh(*refresh)}
	if c.schema != "" {
		opts = append(opts, dashboard.WithSchema(c.schema))
	}
	if *allowResign {
		opts = append(opts, dashboard.WithResign())
	}
	h, err := dashboard.New(db, opts...)
	if err != nil {
		return e.fail(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return e.fail(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "serving the dashboard on http://%s/ (Ctrl-C to stop)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return exitOK
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return exitOK
		}
		return e.fail(err)
	}
}
