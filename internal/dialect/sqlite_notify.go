package dialect

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Handoff notifications on SQLite. Processes sharing a database file share
// nothing else, so the notification goes through a file beside it: the
// database's path with handoffSuffix, as SQLite names its -wal and -shm
// files. Notify appends one line, the channel and the quoted payload, in a
// single write; a listener is told by the kernel that the file changed (inotify, on
// Linux; elsewhere Listen returns ErrCannotListen and candidates wait for
// their tick) and reads the lines appended since it last looked.
//
// In a caller's transaction the line is written inside it, before it
// commits, as a local wake-up is. A candidate woken by it takes the
// database's write lock to elect, so it waits (SQLite's busy timeout, whose
// sleeps grow from 1 ms to 100 ms) until that transaction ends and then sees
// the vacant seat; after a rollback it finds the seat held and has spent
// one round. In a transaction the library began (DeferNotifyWaits), the
// line is written once that transaction has ended instead, so that those
// woken find the write lock free rather than sleeping in the busy handler.
// Lines are hints: a listener that finds the
// file shorter than where it had read (Notify truncates it past
// handoffFileMax) passes an empty payload, meaning "any namespace".

// handoffSuffix names the notification file: "<database path>" + suffix.
const handoffSuffix = "-sqlelect-handoff"

// handoffFileMax is the size past which Notify empties the file before it
// appends.
const handoffFileMax = 64 << 10

var _ Notifier = sqlite{}

// HoldsListenConn is false: a listener watches a file and holds no
// connection.
func (sqlite) HoldsListenConn() bool { return false }

// Notify appends channel and payload to the database's notification file.
// An in-memory database has no file and no other process to tell: Notify
// then does nothing. So does a platform without file-change notifications.
// It fails only when the database cannot say where its file is.
func (d sqlite) Notify(ctx context.Context, conn gorm.ConnPool, channel, payload string) error {
	if !fileWatchSupported {
		return nil
	}
	if channel == "" || strings.ContainsAny(channel, " \n") {
		return fmt.Errorf("sqlite notification: the channel %q is empty or contains a space or a newline", channel)
	}
	path := d.file
	if !d.fileKnown {
		var err error
		if path, err = sqliteFile(ctx, conn); err != nil {
			return err
		}
	}
	if path == "" {
		return nil
	}
	// A hint that cannot be written (a directory this process may not
	// write, a file another user created) must not undo the transaction
	// that vacates the seat: it is dropped, and candidates in other
	// processes find the vacancy at their tick.
	write := func() { _ = appendHandoff(path+handoffSuffix, fileMode(path), handoffLine(channel, payload)) }
	if !deferNotifyWait(ctx, write) {
		write()
	}
	return nil
}

// notifyFile is Notify after a vacating transaction that has committed, on
// a database whose file detect read: the line is appended at once. A line
// that cannot be written is dropped, as Notify drops it.
func (d sqlite) notifyFile(channel, payload string) {
	if !fileWatchSupported || d.file == "" || channel == "" || strings.ContainsAny(channel, " \n") {
		return
	}
	_ = appendHandoff(d.file+handoffSuffix, fileMode(d.file), handoffLine(channel, payload))
}

// handoffLine is the line of one notification: the channel, a space, and
// the payload quoted as a Go string, so that a payload (a namespace) may
// hold any byte, a newline too.
func handoffLine(channel, payload string) string {
	return channel + " " + strconv.Quote(payload) + "\n"
}

// appendHandoff appends line to the file at name, emptying it first when it
// has grown past handoffFileMax. The line goes in one write to a file
// opened for appending, so lines from concurrent writers do not interleave.
func appendHandoff(name string, mode os.FileMode, line string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, mode)
	if err != nil {
		return fmt.Errorf("sqlite notification: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Size() > handoffFileMax {
		_ = f.Truncate(0)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sqlite notification: %w", err)
	}
	return nil
}

// fileMode is the permission of the database file, for the notification
// file beside it (so that every process that may open the database may
// notify), or 0o644 when it cannot be read.
func fileMode(path string) os.FileMode {
	if st, err := os.Stat(path); err == nil {
		return st.Mode().Perm()
	}
	return 0o644
}

// sqliteFile returns the path of the main database of conn's connection,
// or "" for an in-memory or temporary one.
func sqliteFile(ctx context.Context, conn interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) (string, error) {
	rows, err := conn.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int64
			name, file string
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", err
		}
		if name == "main" {
			return file, rows.Err()
		}
	}
	return "", rows.Err()
}

// listenProbeTimeout bounds the wait for Listen's own probe line.
var listenProbeTimeout = time.Second

// Listen watches the notification file of db's database and calls fn with
// the payload of every line on channel appended after ready. It reads the
// path with one of db's connections and gives it back, unless detect read
// it already: a listener holds no connection. Like PostgreSQL's Listen, it first appends a probe line and
// waits for it, so that a file system whose changes are not reported (some
// network and FUSE file systems) makes it return ErrCannotListen rather
// than listen in vain.
func (d sqlite) Listen(ctx context.Context, db *sql.DB, channel string, ready func(), fn func(string)) error {
	if !fileWatchSupported {
		return fmt.Errorf("%w: no file-change notifications on this platform", ErrCannotListen)
	}
	path := d.file
	if !d.fileKnown {
		var err error
		if path, err = sqliteFile(ctx, db); err != nil {
			return err
		}
	}
	if path == "" {
		return fmt.Errorf("%w: an in-memory SQLite database is not shared with other processes", ErrCannotListen)
	}
	name := path + handoffSuffix
	mode := fileMode(path)
	// Create the file, so that it can be watched, and start reading at its
	// end: lines already there are old news.
	if err := appendHandoff(name, mode, ""); err != nil {
		return fmt.Errorf("%w: %w", ErrCannotListen, err)
	}
	w, err := watchFile(name)
	if err != nil {
		return fmt.Errorf("%w: sqlite notification: watching %s: %w", ErrCannotListen, name, err)
	}
	defer w.Close()
	stop := context.AfterFunc(ctx, func() { w.Close() })
	defer stop()
	r, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("sqlite notification: %w", err)
	}
	defer r.Close()
	off, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("sqlite notification: %w", err)
	}
	tail := &handoffReader{f: r, off: off, channel: channel}

	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	probe := probePrefix + hex.EncodeToString(nonce[:])
	if err := appendHandoff(name, mode, handoffLine(channel, probe)); err != nil {
		return fmt.Errorf("%w: %w", ErrCannotListen, err)
	}
	probed := false
	var early []string
	timeout := time.AfterFunc(listenProbeTimeout, func() { w.Close() })
	for !probed {
		if err := w.Wait(); err != nil {
			timeout.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: the probe line appended to %s was not reported within %v: %w", ErrCannotListen, name, listenProbeTimeout, err)
		}
		tail.read(func(p string) {
			switch {
			case p == probe:
				probed = true
			case !strings.HasPrefix(p, probePrefix):
				early = append(early, p)
			}
		})
	}
	if !timeout.Stop() {
		// The timer fired as the probe arrived and closed the watch.
		return fmt.Errorf("sqlite notification: watch of %s ended", name)
	}
	ready()
	for _, p := range early {
		fn(p)
	}
	for {
		if err := w.Wait(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sqlite notification: watching %s: %w", name, err)
		}
		tail.read(func(p string) {
			if !strings.HasPrefix(p, probePrefix) {
				fn(p)
			}
		})
	}
}

// handoffReader reads the lines appended to the notification file.
type handoffReader struct {
	f       *os.File
	off     int64 // where the next unread line starts; a line still being written is read again
	channel string
	buf     []byte
}

// read passes fn the payload of each complete line on its channel appended
// since the last read, and "" when the file was emptied meanwhile (lines
// may have been missed).
func (h *handoffReader) read(fn func(payload string)) {
	st, err := h.f.Stat()
	if err != nil {
		return
	}
	if st.Size() < h.off {
		h.off = 0
		fn("")
	}
	n := st.Size() - h.off
	if n <= 0 {
		return
	}
	if int64(cap(h.buf)) < n {
		h.buf = make([]byte, n)
	}
	b := h.buf[:n]
	n2, err := h.f.ReadAt(b, h.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	b = b[:n2]
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return // only part of a line so far
	}
	h.off += int64(end + 1)
	for _, line := range bytes.Split(b[:end], []byte{'\n'}) {
		ch, quoted, ok := bytes.Cut(line, []byte{' '})
		if !ok || string(ch) != h.channel {
			continue
		}
		if payload, err := strconv.Unquote(string(quoted)); err == nil {
			fn(payload)
		}
	}
}
