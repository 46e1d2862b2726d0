package main

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
)

// plotSVG draws the statements each process sent per interval against the
// number of namespaces (log scale), one line per process count and
// balancing mode, as a standalone SVG, with a dotted line at target when it
// is not zero.
func plotSVG(title string, points []point, target float64) []byte {
	const (
		w, h                   = 720, 420
		left, right, top, bott = 70, 200, 40, 60
	)
	type key struct {
		p       int
		balance bool
	}
	lines := map[key][]point{}
	maxY, maxM := 1.0, 1
	for _, pt := range points {
		k := key{pt.p, pt.balance}
		lines[k] = append(lines[k], pt)
		maxY = max(maxY, pt.perProcInterval)
		maxM = max(maxM, pt.m)
	}
	yTop := math.Ceil(maxY)
	if yTop < 4 {
		yTop = 4
	}
	xMax := math.Log10(float64(max(maxM, 10)))
	x := func(m int) float64 {
		return left + float64(w-left-right)*math.Log10(float64(m))/xMax
	}
	y := func(v float64) float64 {
		return float64(h-bott) - float64(h-top-bott)*v/yTop
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	// Axes, ticks and grid.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, h-bott, w-right, h-bott)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, h-bott)
	for m := 1; float64(m) <= math.Pow(10, xMax)+0.5; m *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n",
			x(m), top, x(m), h-bott, x(m), h-bott+18, m)
	}
	step := math.Max(1, math.Ceil(yTop/8))
	for v := 0.0; v <= yTop; v += step {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, y(v), w-right, y(v), left-6, y(v)+4, v)
	}
	if target > 0 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00" stroke-dasharray="2,3"/><text x="%d" y="%.1f" fill="#c00">target %g</text>`+"\n",
			left, y(target), w-right, y(target), w-right+6, y(target)+4, target)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">namespaces (M, log scale)</text>`+"\n", left+(w-left-right)/2, h-18)
	fmt.Fprintf(&b, `<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">statements per process per interval</text>`+"\n", top+(h-top-bott)/2)
	keys := make([]key, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.p, b.p); c != 0 {
			return c
		}
		return cmp.Compare(fmt.Sprint(a.balance), fmt.Sprint(b.balance))
	})
	colors := []string{"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"}
	for i, k := range keys {
		pts := lines[k]
		slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.m, b.m) })
		color := colors[i%len(colors)]
		dash := ""
		label := fmt.Sprintf("P = %d, balance off", k.p)
		if k.balance {
			dash = ` stroke-dasharray="6,4"`
			label = fmt.Sprintf("P = %d, balance on", k.p)
		}
		var path bytes.Buffer
		for j, pt := range pts {
			op := "L"
			if j == 0 {
				op = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", op, x(pt.m), y(pt.perProcInterval))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", path.String(), color, dash)
		for _, pt := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>M=%d P=%d: %.2f</title></circle>`+"\n",
				x(pt.m), y(pt.perProcInterval), color, pt.m, pt.p, pt.perProcInterval)
		}
		ly := top + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+10, ly, w-right+40, ly, color, dash, w-right+46, ly+4, label)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
