package main

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
)

// plotSVG draws the cost of each measured size against the number of
// namespaces (log scale), one line per process count and balancing mode,
// as a standalone SVG: the statements each process sent per interval
// (with a dotted line at target when it is not zero), and, when the
// server counted them, the rows the database wrote and read per interval,
// all processes together (log scale).
func plotSVG(title string, points []point, target float64) []byte {
	const (
		w, panelH              = 720, 300
		left, right, top, bott = 80, 200, 40, 50
	)
	type key struct {
		p       int
		balance bool
	}
	lines := map[key][]point{}
	maxM := 1
	for _, pt := range points {
		k := key{pt.p, pt.balance}
		lines[k] = append(lines[k], pt)
		maxM = max(maxM, pt.m)
	}
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
	for _, k := range keys {
		slices.SortFunc(lines[k], func(a, b point) int { return cmp.Compare(a.m, b.m) })
	}
	type panel struct {
		label  string
		value  func(point) float64
		logY   bool
		target float64
	}
	panels := []panel{{label: "statements per process per interval", value: func(pt point) float64 { return pt.perProcInterval }, target: target}}
	for _, pn := range []panel{
		{label: "rows written per interval", value: func(pt point) float64 { return pt.rowsWritten }, logY: true},
		{label: "rows read per interval", value: func(pt point) float64 { return pt.rowsRead }, logY: true},
	} {
		if slices.ContainsFunc(points, func(pt point) bool { return pn.value(pt) >= 0 }) {
			panels = append(panels, pn)
		}
	}
	h := top + len(panels)*panelH
	xMax := math.Log10(float64(max(maxM, 10)))
	x := func(m int) float64 {
		return left + float64(w-left-right)*math.Log10(float64(m))/xMax
	}
	colors := []string{"#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s</text>`+"\n", left, html.EscapeString(title+": cost against namespaces"))
	for i, pn := range panels {
		pTop := top + i*panelH + 10
		pBot := top + (i+1)*panelH - bott
		// The y scale: linear from 0, or log from the decade below the
		// smallest value.
		lo, hi := math.Inf(1), 0.0
		for _, pt := range points {
			if v := pn.value(pt); v >= 0 {
				hi = max(hi, v)
				if v > 0 {
					lo = min(lo, v)
				}
			}
		}
		var y func(v float64) float64
		var ticks []float64
		if pn.logY {
			if math.IsInf(lo, 1) {
				lo = 1
			}
			dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(max(hi, 1)))
			if dHi <= dLo {
				dHi = dLo + 1
			}
			y = func(v float64) float64 {
				l := dLo
				if v > 0 {
					l = max(math.Log10(v), dLo)
				}
				return float64(pBot) - float64(pBot-pTop)*(l-dLo)/(dHi-dLo)
			}
			for d := dLo; d <= dHi; d++ {
				ticks = append(ticks, math.Pow(10, d))
			}
		} else {
			yTop := max(math.Ceil(hi), 4, math.Ceil(pn.target))
			y = func(v float64) float64 { return float64(pBot) - float64(pBot-pTop)*v/yTop }
			step := math.Max(1, math.Ceil(yTop/8))
			for v := 0.0; v <= yTop; v += step {
				ticks = append(ticks, v)
			}
		}
		// Axes, ticks and grid.
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, pBot, w-right, pBot)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, pTop, left, pBot)
		for m := 1; float64(m) <= math.Pow(10, xMax)+0.5; m *= 10 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n",
				x(m), pTop, x(m), pBot, x(m), pBot+16, m)
		}
		for _, v := range ticks {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
				left, y(v), w-right, y(v), left-6, y(v)+4, tickLabel(v))
		}
		if pn.target > 0 {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00" stroke-dasharray="2,3"/><text x="%d" y="%.1f" fill="#c00">target %g</text>`+"\n",
				left, y(pn.target), w-right, y(pn.target), w-right+6, y(pn.target)+4, pn.target)
		}
		scale := ""
		if pn.logY {
			scale = " (log scale)"
		}
		fmt.Fprintf(&b, `<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (pTop+pBot)/2, html.EscapeString(pn.label))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">namespaces (M, log scale); %s%s</text>`+"\n", left+(w-left-right)/2, pBot+34, html.EscapeString(pn.label), scale)
		for j, k := range keys {
			color := colors[j%len(colors)]
			dash := ""
			if k.balance {
				dash = ` stroke-dasharray="6,4"`
			}
			var path bytes.Buffer
			for _, pt := range lines[k] {
				v := pn.value(pt)
				if v < 0 {
					continue
				}
				op := "L"
				if path.Len() == 0 {
					op = "M"
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", op, x(pt.m), y(v))
			}
			if path.Len() == 0 {
				continue
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", path.String(), color, dash)
			for _, pt := range lines[k] {
				if v := pn.value(pt); v >= 0 {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>M=%d P=%d: %.2f</title></circle>`+"\n",
						x(pt.m), y(v), color, pt.m, pt.p, v)
				}
			}
		}
	}
	for j, k := range keys {
		color := colors[j%len(colors)]
		dash := ""
		label := fmt.Sprintf("P = %d, balance off", k.p)
		if k.balance {
			dash = ` stroke-dasharray="6,4"`
			label = fmt.Sprintf("P = %d, balance on", k.p)
		}
		ly := top + 20 + 18*j
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+10, ly, w-right+40, ly, color, dash, w-right+46, ly+4, label)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// tickLabel writes a tick's value with its thousands grouped: 1,000,000,
// not 1e+06.
func tickLabel(v float64) string {
	if v != math.Trunc(v) || v < 1000 {
		return fmt.Sprintf("%g", v)
	}
	digits := fmt.Sprintf("%.0f", v)
	var out []byte
	for i, d := range []byte(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, d)
	}
	return string(out)
}
