package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sqlelect/sqlelect/dashboard"
)

func (e env) dashboard(ctx context.Context, args []string) int {
	fs, c := e.flags("dashboard", "",
		"Serves a live web page of every namespace: its leader, lease countdown, candidates and recent terms.\n"+
			"The page polls api/state, which serves the same data as JSON. Read-only unless --allow-resign, which\n"+
			"adds a resign button that ends the term shown (as `sqlelect resign` does). The dashboard has no\n"+
			"authentication: the button is protected only by a same-origin check and a CSRF token, so anyone who\n"+
			"can load the page can vacate seats. Serve it only to trusted operators (the default listens on the\n"+
			"loopback address; put it behind your own authentication to expose it further).",
		"sqlelect dashboard --listen 127.0.0.1:8080", false)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	allowResign := fs.Bool("allow-resign", false, "show a resign button on each led namespace (no authentication: same-origin POST with a CSRF token)")
	refresh := fs.Duration("refresh", time.Second, "how often the page polls")
	pos, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(fs, "dashboard takes no arguments")
	}
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	// The server's log: seats vacated through the page, database errors.
	opts := []dashboard.Option{dashboard.WithRefresh(*refresh), dashboard.WithLogger(slog.New(slog.NewTextHandler(e.stderr, nil)))}
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
