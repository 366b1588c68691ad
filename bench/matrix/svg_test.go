package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// svgDoc is what the tests read back from an SVG: per panel, its series'
// names and their markers.
type svgDoc struct {
	panels map[string][]string // panel id -> series names, in order
	marks  map[string]int      // "panel/series" -> circles
	lines  map[string]int      // "panel/series" -> polylines
	texts  []string
}

// parseSVG decodes every token of doc (failing on malformed XML) and
// collects the panels and series.
func parseSVG(t *testing.T, doc []byte) svgDoc {
	t.Helper()
	d := svgDoc{panels: map[string][]string{}, marks: map[string]int{}, lines: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var stack []xml.StartElement
	var panelID, seriesName string
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "well-formed XML")
		switch tk := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tk.Name.Local
				require.Equal(t, "http://www.w3.org/2000/svg", tk.Name.Space)
			}
			stack = append(stack, tk)
			attr := func(name string) string {
				for _, a := range tk.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			for _, a := range tk.Attr {
				require.NotContains(t, a.Value, "NaN", "<%s %s>", tk.Name.Local, a.Name.Local)
				require.NotContains(t, a.Value, "Inf", "<%s %s>", tk.Name.Local, a.Name.Local)
			}
			switch {
			case tk.Name.Local == "g" && attr("class") == "panel":
				panelID = attr("id")
				d.panels[panelID] = []string{}
			case tk.Name.Local == "g" && attr("class") == "series":
				seriesName = attr("data-name")
				d.panels[panelID] = append(d.panels[panelID], seriesName)
			case tk.Name.Local == "circle" && seriesName != "":
				d.marks[panelID+"/"+seriesName]++
			case tk.Name.Local == "polyline" && seriesName != "":
				d.lines[panelID+"/"+seriesName]++
			}
		case xml.EndElement:
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.Name.Local == "g" {
				if seriesName != "" {
					seriesName = ""
				} else {
					panelID = ""
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tk)); s != "" {
				d.texts = append(d.texts, s)
			}
		}
	}
	require.Equal(t, "svg", root)
	require.Empty(t, stack, "every element closed")
	return d
}

func fixedFigure() figure {
	return figure{
		Title: "Locks <&> \"quotes\"",
		Notes: []string{"a note"},
		Panels: []panel{
			{
				ID: "counter", Title: "counter", XLabel: "processes", YLabel: "ops/s",
				Categories: []string{"2", "4", "8"}, Lines: true, Format: si,
				Series: []series{
					{Name: "a<b", Color: "#111111", Bold: true, Points: []point{{0, 2e7, 1.5e7, 2.5e7, "a 2"}, {1, 3e7, 2e7, 4e7, "a 4"}, {2, 2.5e7, 2e7, 3e7, "a 8"}}},
					{Name: "b", Color: "#222222", Points: []point{{0, 4e5, 3e5, 5e5, "b 2"}, {2, 5e5, 0, 0, "b 8, no range"}}},
					{Name: "c", Color: "#333333", Points: []point{{1, 0, 0, 0, "zero: not drawn"}, {2, 9e6, 8e6, 1e7, "c 8"}}},
				},
			},
			{
				ID: "uncontended", Title: "uncontended", YLabel: "time", Format: duration,
				Categories: []string{"uncontended P=1"},
				Series: []series{
					{Name: "a<b", Color: "#111111", Points: []point{{0, 9, 8, 10, "a"}}},
					{Name: "b", Color: "#222222", Points: []point{{0, 900, 850, 1000, "b"}}},
				},
			},
			{ID: "empty", Title: "nothing ran", Format: si},
		},
		Legend: []legendEntry{{"a<b", "about a & b", "#111111", true}, {"b", "about b", "#222222", false}},
	}
}

// The writer makes well-formed SVG with one series per contender in each
// panel, a marker per drawable point, a line per series of a lines panel,
// and escapes text.
func TestWriteSVG(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, writeSVG(&buf, fixedFigure()))
	d := parseSVG(t, buf.Bytes())
	require.Equal(t, map[string][]string{
		"counter":     {"a<b", "b", "c"},
		"uncontended": {"a<b", "b"},
		"empty":       {},
	}, d.panels)
	require.Equal(t, map[string]int{
		"counter/a<b": 3, "counter/b": 2, "counter/c": 1, // c's zero has no place on a log axis
		"uncontended/a<b": 1, "uncontended/b": 1,
	}, d.marks)
	require.Equal(t, map[string]int{"counter/a<b": 1, "counter/b": 1}, d.lines, "a line joins two points or more")
	require.Contains(t, d.texts, `Locks <&> "quotes"`)
	require.Contains(t, d.texts, "no data")
	// Decades of the counter panel, 100k to 100M; of the time panel, 1 ns to 1 µs.
	for _, tick := range []string{"100k", "1M", "10M", "100M", "1 ns", "10 ns", "100 ns", "1 µs"} {
		require.Contains(t, d.texts, tick)
	}
	require.NotContains(t, d.texts, "1G")
}

func TestTrimZeros(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"1.00M": "1M", "10.0 ns": "10 ns", "100k": "100k", "1.50M": "1.50M", "2.05": "2.05", "3.0": "3"} {
		require.Equal(t, want, trimZeros(in), in)
	}
}
