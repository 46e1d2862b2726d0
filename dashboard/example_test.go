package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/sqlelect/sqlelect/dashboard"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// Mount the dashboard in an admin server of your own, under a prefix. The
// page, its assets and api/state are served relative to it.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "dashboard-example")
	defer os.RemoveAll(dir)
	db, err := session.Open("sqlite:" + filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	if err := migrate.Up(context.Background(), db); err != nil {
		log.Fatal(err)
	}

	h, err := dashboard.New(db) // read-only; dashboard.WithResign() adds the resign button
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/elections/", http.StripPrefix("/elections", h))

	srv := httptest.NewServer(mux) // in production: http.ListenAndServe("127.0.0.1:8080", mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/elections/api/state")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	// Output: 200 OK application/json
}
