package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on fd 3, answers and events on fd 4,
// each message ending in a NUL byte), attached to one page.
type browser struct {
	cmd     *exec.Cmd
	w       *os.File
	session string

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan cdpMessage
	events  []cdpMessage
	done    chan struct{}
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// chromium finds the browser: $CHROMIUM, else chromium or chromium-browser
// on the PATH.
func chromium() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on the PATH")
}

// startBrowser starts Chromium with a page of width × height CSS pixels.
func startBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	path, err := chromium()
	if err != nil {
		if os.Getenv("SQLELECT_BROWSER") == "required" {
			t.Fatalf("SQLELECT_BROWSER=required: %v (Debian: apt-get install chromium)", err)
		}
		t.Skipf("%v (Debian: apt-get install chromium; SQLELECT_BROWSER=required makes this a failure)", err)
	}
	inR, inW, err := os.Pipe() // we write, the browser reads (its fd 3)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // the browser writes (its fd 4), we read
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
		"--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	inR.Close()
	outW.Close()
	b := &browser{cmd: cmd, w: inW, waiting: map[int]chan cdpMessage{}, done: make(chan struct{})}
	go b.read(outR)
	t.Cleanup(func() {
		inW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-b.done
		if t.Failed() {
			t.Logf("chromium stderr:\n%s", stderr.String())
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call(t, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call(t, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(t, b.session, "Page.enable", nil, nil)
	b.call(t, b.session, "Runtime.enable", nil, nil)
	b.call(t, b.session, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}, nil)
	return b
}

func (b *browser) read(r *os.File) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.waiting[m.ID]; ch != nil {
				ch <- m
				delete(b.waiting, m.ID)
			}
		} else {
			b.events = append(b.events, m)
		}
		b.mu.Unlock()
	}
}

// call sends a command and decodes its result into out (if not nil).
func (b *browser) call(t *testing.T, session, method string, params, out any) {
	t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		t.Fatalf("%s: writing to the browser: %v", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the browser went away", method)
		}
		if m.Error != nil {
			t.Fatalf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				t.Fatalf("%s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer from the browser", method)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func (b *browser) eval(t *testing.T, expr string, out any) {
	t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call(t, b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		t.Fatalf("evaluating %s: %s", expr, res.ExceptionDetails.Text)
	}
	if err := json.Unmarshal(res.Result.Value, out); err != nil {
		t.Fatalf("evaluating %s: %v (%s)", expr, err, res.Result.Value)
	}
}

// waitEval evaluates expr until it returns true.
func (b *browser) waitEval(t *testing.T, within time.Duration, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		var ok bool
		b.eval(t, expr, &ok)
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after %v, the page does not show %s", within, what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// eventsNamed returns the events of a method received so far.
func (b *browser) eventsNamed(method string) []cdpMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []cdpMessage
	for _, e := range b.events {
		if e.Method == method {
			out = append(out, e)
		}
	}
	return out
}
