package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sqlelect/sqlelect/internal/fleet"
)

// printTimeline writes, for each process of a cold start, when it was
// ready and how many namespaces it led at each step until the cold start
// ended (one step past it), then the sum over the processes: where the
// cold start's time went, and which processes lagged.
func printTimeline(w io.Writer, title string, f *fleet.Fleet, step, cold time.Duration) {
	ready, led := f.LedOver(step, cold+step)
	writeTimeline(w, title, step, ready, led)
}

// writeTimeline is printTimeline's layout, of what fleet.LedOver returned.
func writeTimeline(w io.Writer, title string, step time.Duration, ready []time.Duration, led [][]int) {
	fmt.Fprintf(w, "%s, namespaces led every %v after the start:\n", title, step)
	var total []int
	var b strings.Builder
	for i, row := range led {
		b.Reset()
		fmt.Fprintf(&b, "  process %-3d ready %6.2fs |", i, ready[i].Seconds())
		for j, n := range row {
			fmt.Fprintf(&b, " %5d", n)
			if j == len(total) {
				total = append(total, 0)
			}
			total[j] += n
		}
		fmt.Fprintln(w, b.String())
	}
	b.Reset()
	fmt.Fprintf(&b, "  %-25s|", "all")
	for _, n := range total {
		fmt.Fprintf(&b, " %5d", n)
	}
	fmt.Fprintln(w, b.String())
}
