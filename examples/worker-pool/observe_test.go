package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeMetricsAndHealth: a member with -http serves its elections at
// /metrics, in Prometheus's text format, and /healthz answers ok.
func TestServeMetricsAndHealth(t *testing.T) {
	o := options{
		dsn: "sqlite:" + t.TempDir() + "/m.db", workers: 1, expire: time.Second,
		enqueue: 50 * time.Millisecond, reap: 200 * time.Millisecond, logs: logWriter{t},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app, err := openApp(ctx, o, newTimeline(io.Discard, true))
	if err != nil {
		t.Fatal(err)
	}
	defer app.close()
	done := make(chan error, 1)
	go func() { done <- app.newMember("").run(ctx) }()
	addr, err := serveHTTP(ctx, "127.0.0.1:0", app.metrics, &app.health)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get("/metrics")
		if strings.Contains(body, `sqlelect_is_leader{namespace="worker-pool.scheduler"} 1`) &&
			strings.Contains(body, `sqlelect_elections_total{namespace="worker-pool.reaper",outcome="led"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed the member leading:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
