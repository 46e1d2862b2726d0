package fleet

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
)

// lineWriter writes whole lines to w, each with its writer's prefix, so
// that the processes' lines do not interleave within a line.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{w: w} }

func (lw *lineWriter) prefixed(prefix string) io.Writer {
	if lw.w == nil {
		return io.Discard
	}
	return &prefixWriter{lw: lw, prefix: prefix}
}

// prefixWriter is one process's standard error; exec copies to it from
// one goroutine.
type prefixWriter struct {
	lw      *lineWriter
	prefix  string
	pending []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.pending = append(p.pending, b...)
	for {
		i := bytes.IndexByte(p.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := append([]byte(p.prefix), p.pending[:i+1]...)
		p.pending = p.pending[i+1:]
		p.lw.mu.Lock()
		_, _ = p.lw.w.Write(line)
		p.lw.mu.Unlock()
	}
}

// Log keeps what is written to it, for Config.Stderr: the processes'
// lines, read while they may still be writing.
type Log struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail returns the last n lines written, after a line saying how many came
// before them.
func (l *Log) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
