package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sqlelect/sqlelect/dashboard"
)

func (e env) dashboard(ctx context.Context, args []string) int {
	fs, c := e.flags("dashboard", "",
		"Serves a live web page of the elections: a summary (namespaces, led, without a leader, leadership\n"+
			"changes in the last hour), a timeline of the last hour per process, a filterable, sortable table of\n"+
			"the namespaces paged by the server (leader, term, lease left, candidates, each with its recent terms),\n"+
			"the seats each process leads, and a namespace's detail with its candidates, history and timeline. A\n"+
			"refresh costs the database a constant number of statements whatever the number of namespaces. The\n"+
			"page polls api/state, which serves the same data as JSON. Read-only unless --allow-resign, which adds\n"+
			"a resign button that ends the term shown (as `sqlelect resign` does). The dashboard has no\n"+
			"authentication: the button is protected only by a same-origin check and a CSRF token, so anyone who\n"+
			"can load the page can vacate seats. Serve it only to trusted operators (the default listens on the\n"+
			"loopback address; --allow-resign on any other address prints a warning; put it behind your own\n"+
			"authentication to expose it further).",
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
	db, err := e.openExisting(c)
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
	local, public := dashboardURLs(ln.Addr())
	fmt.Fprintf(e.stdout, "serving the dashboard on %s (Ctrl-C to stop)\n", local)
	if public != "" {
		fmt.Fprintf(e.stdout, "listening on every interface: from other hosts, %s\n", public)
	}
	if *allowResign && !loopback(ln.Addr()) {
		fmt.Fprintf(e.stderr, "sqlelect: warning: --allow-resign on %s, which is not a loopback address: anyone who can reach it "+
			"can vacate seats (there is no authentication, only a same-origin check and a CSRF token); listen on 127.0.0.1 "+
			"or put the dashboard behind your own authentication\n", ln.Addr())
	}
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

// dashboardURLs returns the URL to open the dashboard at on this host and,
// when it listens on every interface (0.0.0.0 or ::), the URL other hosts
// use, by this host's name. A wildcard address is not one a browser can
// open.
func dashboardURLs(addr net.Addr) (local, public string) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String() + "/", ""
	}
	port := strconv.Itoa(tcp.Port)
	if !tcp.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort(tcp.IP.String(), port) + "/", ""
	}
	// 0.0.0.0 takes IPv4 only; "::" (what ":8080" listens on) takes both,
	// and localhost reaches it whichever address the name resolves to.
	loop := "127.0.0.1"
	if tcp.IP.To4() == nil {
		loop = "localhost"
	}
	local = "http://" + net.JoinHostPort(loop, port) + "/"
	if host, err := os.Hostname(); err == nil && host != "" {
		public = "http://" + net.JoinHostPort(host, port) + "/"
	}
	return local, public
}

// loopback reports whether addr is a loopback address, reachable from this
// host only.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
