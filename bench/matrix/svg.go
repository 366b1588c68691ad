package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// A figure is panels of points on a logarithmic y axis, in two columns,
// with one legend for all of them. writeSVG draws it; SVG is text, so no
// plotting library is needed.
type figure struct {
	Title  string
	Notes  []string // lines under the title
	Panels []panel
	Legend []legendEntry
}

type panel struct {
	ID         string // the SVG group's id
	Title      string
	XLabel     string
	YLabel     string
	Categories []string // the x axis, evenly spaced
	Lines      bool     // join a series' points (x is an ordered quantity)
	Format     func(float64) string
	Series     []series
}

type series struct {
	Name   string
	Color  string
	Bold   bool
	Points []point
}

// point is a median with the range of the samples around it.
type point struct {
	X         int // index into the panel's categories
	Y, Lo, Hi float64
	Label     string // shown on hover
}

type legendEntry struct {
	Name, About, Color string
	Bold               bool
}

// Geometry, in SVG user units (pixels).
const (
	svgWidth     = 1000
	panelHeight  = 330
	titleHeight  = 34
	noteHeight   = 17
	legendRow    = 20
	plotLeft     = 72 // from the panel's left edge to the y axis
	plotRight    = 16
	plotTop      = 30
	plotBottom   = 48
	markerRadius = 3.5
)

// writeSVG draws fig as a standalone SVG document.
func writeSVG(w io.Writer, fig figure) error {
	rows := (len(fig.Panels) + 1) / 2
	legendTop := titleHeight + noteHeight*len(fig.Notes) + 8 + rows*panelHeight + 10
	height := legendTop + legendRow*len(fig.Legend) + 12
	s := &svgBuilder{}
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	s.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.text(svgWidth/2, 22, "middle", `font-size="17" font-weight="bold"`, fig.Title)
	for i, n := range fig.Notes {
		s.text(svgWidth/2, float64(titleHeight+noteHeight*(i+1)-3), "middle", `fill="#444"`, n)
	}
	top := titleHeight + noteHeight*len(fig.Notes) + 8
	for i, p := range fig.Panels {
		x := float64(i%2) * svgWidth / 2
		y := float64(top + (i/2)*panelHeight)
		s.panel(p, x, y, svgWidth/2, panelHeight)
	}
	s.printf(`<g class="legend">` + "\n")
	for i, e := range fig.Legend {
		x := float64(plotLeft)
		y := float64(legendTop + i*legendRow)
		width := 2.0
		if e.Bold {
			width = 3.5
		}
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x, y+8, x+24, y+8, esc(e.Color), width)
		s.printf(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`+"\n", x+12, y+8, markerRadius, esc(e.Color))
		weight := ""
		if e.Bold {
			weight = `font-weight="bold"`
		}
		s.text(x+32, y+12, "start", weight, e.Name)
		s.text(x+190, y+12, "start", `fill="#444"`, e.About)
	}
	s.printf("</g>\n</svg>\n")
	_, err := io.WriteString(w, s.String())
	return err
}

type svgBuilder struct{ strings.Builder }

func (s *svgBuilder) printf(format string, args ...any) { fmt.Fprintf(&s.Builder, format, args...) }

// text writes a <text> element; attrs are extra attributes, written as is.
func (s *svgBuilder) text(x, y float64, anchor, attrs, content string) {
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, esc(content))
}

// esc escapes text for XML content and attribute values.
func esc(t string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(t)) // a strings.Builder does not fail
	return b.String()
}

// trimZeros drops a fraction of zeros from a number in s: "1.00M" is
// "1M", "10.0 ns" is "10 ns" (the decades' labels).
func trimZeros(s string) string {
	i := strings.IndexByte(s, '.')
	if i < 0 {
		return s
	}
	j := i + 1
	for j < len(s) && s[j] == '0' {
		j++
	}
	if j < len(s) && s[j] >= '1' && s[j] <= '9' {
		return s
	}
	return s[:i] + s[j:]
}

// logRange is the decades [lo, hi] (as exponents) that hold every
// positive value of p's points, at least one decade.
func logRange(p panel) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, sr := range p.Series {
		for _, pt := range sr.Points {
			for _, v := range []float64{pt.Y, pt.Lo, pt.Hi} {
				if v > 0 {
					lo, hi = math.Min(lo, math.Log10(v)), math.Max(hi, math.Log10(v))
				}
			}
		}
	}
	if math.IsInf(lo, 0) {
		return 0, 0, false
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi, true
}

func (s *svgBuilder) panel(p panel, x, y, w, h float64) {
	left, right := x+plotLeft, x+w-plotRight
	top, bottom := y+plotTop, y+h-plotBottom
	s.printf(`<g class="panel" id="%s">`+"\n", esc(p.ID))
	s.text(x+w/2, y+18, "middle", `font-size="14" font-weight="bold"`, p.Title)
	s.text((left+right)/2, bottom+38, "middle", "", p.XLabel)
	s.printf(`<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x+16, (top+bottom)/2, esc(p.YLabel))
	lo, hi, ok := logRange(p)
	if !ok {
		s.text((left+right)/2, (top+bottom)/2, "middle", `fill="#888"`, "no data")
		s.printf("</g>\n")
		return
	}
	yOf := func(v float64) float64 { return bottom - (math.Log10(v)-lo)/(hi-lo)*(bottom-top) }
	// Grid: a line and a label per decade, fainter lines at 2x and 5x.
	for d := lo; d <= hi; d++ {
		v := math.Pow(10, d)
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ccc"/>`+"\n", left, yOf(v), right, yOf(v))
		s.text(left-6, yOf(v)+4, "end", "", trimZeros(p.Format(v)))
		for _, m := range []float64{2, 5} {
			if d < hi {
				s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, yOf(m*v), right, yOf(m*v))
			}
		}
	}
	s.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top, right-left, bottom-top)
	band := (right - left) / float64(max(1, len(p.Categories)))
	for i, c := range p.Categories {
		s.text(left+band*(float64(i)+0.5), bottom+17, "middle", "", c)
	}
	// Series side by side within a category, so that whiskers do not hide
	// each other: closer together where lines join them.
	spreadOver := 0.6
	if p.Lines {
		spreadOver = 0.3
	}
	n := float64(len(p.Series))
	for k, sr := range p.Series {
		dx := (float64(k) - (n-1)/2) * band * spreadOver / math.Max(n, 1)
		xOf := func(i int) float64 { return left + band*(float64(i)+0.5) + dx }
		width, r := 1.5, markerRadius
		if sr.Bold {
			width, r = 3, markerRadius+1
		}
		s.printf(`<g class="series" data-name="%s" stroke="%s" fill="%s">`+"\n", esc(sr.Name), esc(sr.Color), esc(sr.Color))
		var drawn []point // a log axis has no place for 0
		for _, pt := range sr.Points {
			if pt.Y > 0 && pt.X >= 0 && pt.X < len(p.Categories) {
				drawn = append(drawn, pt)
			}
		}
		if p.Lines && len(drawn) > 1 {
			var pts []string
			for _, pt := range drawn {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(pt.X), yOf(pt.Y)))
			}
			s.printf(`<polyline points="%s" fill="none" stroke-width="%.1f"/>`+"\n", strings.Join(pts, " "), width)
		}
		for _, pt := range drawn {
			if pt.Lo > 0 && pt.Hi > 0 {
				s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke-width="1"/>`+"\n", xOf(pt.X), yOf(pt.Lo), xOf(pt.X), yOf(pt.Hi))
			}
			s.printf(`<circle cx="%.1f" cy="%.1f" r="%.1f" stroke="none"><title>%s</title></circle>`+"\n", xOf(pt.X), yOf(pt.Y), r, esc(pt.Label))
		}
		s.printf("</g>\n")
	}
	s.printf("</g>\n")
}
