package election

import (
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLabelLen is the longest label WithLabel accepts, in bytes; hostnames
// longer than that are cut to it.
const MaxLabelLen = 255

// Identity says who a candidate is, for people reading the election: the
// host and process it runs in, and a label the application chose. Every
// candidate row an Election writes carries the Election's identity, and the
// history records the leader's identity with each term it was granted.
type Identity struct {
	// Hostname is the host's name as the process saw it (os.Hostname), cut
	// to MaxLabelLen bytes; empty when the host has no name, or for rows
	// written before schema version 2.
	Hostname string
	// PID is the process id (os.Getpid); 0 for rows written before schema
	// version 2.
	PID int
	// Label is what the application gave WithLabel, such as a pod name or
	// a version; empty by default.
	Label string
}

// String formats the identity as host/pid, followed by [label] when there
// is one.
func (id Identity) String() string {
	s := fmt.Sprintf("%s/%d", id.Hostname, id.PID)
	if id.Label != "" {
		s += " [" + id.Label + "]"
	}
	return s
}

// WithLabel sets the label stored with every candidate row the Election
// writes, beside the hostname and process id it fills in by itself: a pod
// name, a version, anything that helps an operator tell candidates apart.
// label must be at most MaxLabelLen bytes of UTF-8 without NUL bytes or
// other control characters, or New returns ErrInvalidOption and nothing is
// written.
func WithLabel(label string) Option {
	return optionFunc(func(c *config) {
		if err := validLabel(label); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.label = label
	})
}

func validLabel(label string) error {
	switch {
	case len(label) > MaxLabelLen:
		return fmt.Errorf("%w: label is %d bytes, more than %d", ErrInvalidOption, len(label), MaxLabelLen)
	case !utf8.ValidString(label):
		return fmt.Errorf("%w: label is not valid UTF-8", ErrInvalidOption)
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: label contains the control character %U", ErrInvalidOption, r)
		}
	}
	return nil
}

// localIdentity is the identity of this process with label.
func localIdentity(label string) Identity {
	host, err := os.Hostname()
	if err != nil {
		host = ""
	}
	return Identity{Hostname: truncateUTF8(strings.ToValidUTF8(host, "?"), MaxLabelLen), PID: os.Getpid(), Label: label}
}

// truncateUTF8 cuts s to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
