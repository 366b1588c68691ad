// Package diagrams draws the pictures of the documentation as SVG: the
// layout of a segment, from the layout package's own plan of a default
// segment, and the timeline of a takeover after kill -9. TestDiagrams
// keeps the committed files in docs/ equal to what it draws; run
//
//	go test ./internal/diagrams -update
//
// after a change of the format.
package diagrams

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/shmlock/shmlock/layout"
)

// svg collects the elements of one picture.
type svg struct {
	b    strings.Builder
	w, h int
}

func newSVG(w, h int) *svg {
	s := &svg{w: w, h: h}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&s.b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	return s
}

func (s *svg) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#333"/>`+"\n", x, y, w, h, fill)
}

func (s *svg) text(x, y float64, anchor, weight, str string) {
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, weight, html.EscapeString(str))
}

func (s *svg) line(x1, y1, x2, y2 float64, color string, dash bool) {
	d := ""
	if dash {
		d = ` stroke-dasharray="4 3"`
	}
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s/>`+"\n", x1, y1, x2, y2, color, d)
}

func (s *svg) String() string { return s.b.String() + "</svg>\n" }

// size formats a byte count as the documentation writes it.
func size(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// The colours of the table kinds: locks, directories, the rest.
func fill(k layout.Kind) string {
	switch k {
	case layout.KindOwnerSlots, layout.KindUpgrades, layout.KindLockMgr, layout.KindTxnRecords:
		return "#cfe3f7"
	case layout.KindSlotDirectory, layout.KindUpgradeDirectory, layout.KindRegionDirectory, layout.KindClaimRefs:
		return "#f3e3c3"
	case layout.KindData, layout.KindTxnArena:
		return "#d8efd0"
	}
	return "#eeeeee"
}

// SegmentLayout draws a segment created with default sizes: the header,
// then each table at its offset, with its entries; box heights grow with
// the logarithm of the size, so that a 512-byte table and a 256 KiB arena
// both show; and the 32 bytes of one owner slot beside it.
func SegmentLayout() (string, error) {
	h, err := layout.Plan(layout.Options{}.WithDefaults())
	if err != nil {
		return "", err
	}
	type box struct {
		name, detail string
		off, size    uint64
		fill         string
	}
	boxes := []box{{"header", "magic, version, table offsets, boot id", 0, layout.HeaderSize, "#dddddd"}}
	for _, t := range h.Tables {
		if t.Count == 0 {
			continue
		}
		boxes = append(boxes, box{t.Kind.String(), fmt.Sprintf("%d x %d B", t.Count, t.EntrySize), t.Offset, t.Size(), fill(t.Kind)})
	}
	heights := make([]float64, len(boxes))
	total := 0.0
	for i, b := range boxes {
		heights[i] = 18 + 9*math.Log2(float64(b.size)/float64(layout.HeaderSize)+1)
		total += heights[i]
	}
	const top, left, width = 40.0, 110.0, 300.0
	s := newSVG(900, int(top+total+60))
	s.text(left, 24, "start", "bold", fmt.Sprintf("A segment with default sizes: %s, format version %d", size(h.TotalSize), layout.Version))
	y := top
	for i, b := range boxes {
		s.rect(left, y, width, heights[i], b.fill)
		mid := y + heights[i]/2 + 4
		s.text(left-8, y+12, "end", "normal", fmt.Sprintf("0x%05x", b.off))
		s.text(left+10, mid, "start", "bold", b.name)
		s.text(left+width-10, mid, "end", "normal", size(b.size))
		s.text(left+width+12, mid, "start", "normal", b.detail)
		y += heights[i]
	}
	s.text(left-8, y+4, "end", "normal", fmt.Sprintf("0x%05x", h.TotalSize))
	s.text(left, y+30, "start", "normal", "Every table starts on a 64-byte line; the file is rounded up to 4 KiB. docs/FORMAT.md has every word.")

	// One owner slot, word by word.
	slot := []struct {
		name string
		n    int
	}{{"owner: pid + start time (8 B)", 8}, {"holder id, or 0 (8 B)", 8}, {"generation, or token (8 B)", 8}, {"recursion | inconsistent bit (4 B)", 4}, {"sleepers (4 B)", 4}}
	sx, sy := 640.0, top+150
	s.text(sx, sy-14, "start", "bold", "one owner slot (32 bytes)")
	for _, w := range slot {
		hh := float64(w.n) * 5
		s.rect(sx, sy, 240, hh, "#cfe3f7")
		s.text(sx+8, sy+hh/2+4, "start", "normal", w.name)
		sy += hh
	}
	return s.String(), nil
}

// Takeover draws what happens when the holder of a spinlock is killed: the
// waiter sleeps on the futex in the slot, finds at its next liveness check
// that the recorded process is gone (its start time no longer matches),
// takes the slot over with one compare-and-swap, and is told.
func Takeover() string {
	type event struct {
		lane int // 0: process A, 1: the slot, 2: process B
		t    float64
		text string
	}
	lanes := []string{"process A (holder)", "owner slot in the segment", "process B (waiter)"}
	events := []event{
		{0, 0, "Lock: CAS owner 0 -> A"},
		{1, 0, "owner = A (pid + start time), generation 7"},
		{2, 1, "Lock: owner is A; spin, yield"},
		{1, 1.4, "sleepers = 1"},
		{2, 1.6, "futex wait on the slot (no CPU)"},
		{0, 2.4, "kill -9 (the critical section half done)"},
		{2, 3.4, "50 ms check: A is gone (or its pid reused)"},
		{1, 4.2, "CAS owner A -> B; generation 8; inconsistent"},
		{2, 5.0, "Lock returns: Reclaimed, Inconsistent"},
		{2, 5.8, "repair the data; MarkConsistent; Release"},
		{1, 6.6, "owner = 0; a waiter, if any, is woken"},
	}
	const left, laneW, top, step = 20.0, 330.0, 60.0, 52.0
	s := newSVG(int(left*2+laneW*3), 456)
	s.text(left, 24, "start", "bold", "kill -9 of a holder: the next waiter takes the lock over and is told")
	for i, name := range lanes {
		x := left + laneW*float64(i) + laneW/2
		s.text(x, top-10, "middle", "bold", name)
		s.line(x, top, x, top+step*7.2, "#999", true)
	}
	for _, e := range events {
		x := left + laneW*float64(e.lane) + laneW/2
		y := top + 16 + e.t*step
		color := "#cfe3f7"
		switch {
		case strings.HasPrefix(e.text, "kill"):
			color = "#f5c6c6"
		case strings.Contains(e.text, "Reclaimed"), strings.HasPrefix(e.text, "CAS owner A"):
			color = "#d8efd0"
		}
		s.rect(x-laneW/2+8, y-14, laneW-16, 22, color)
		s.text(x, y+1, "middle", "normal", e.text)
	}
	return s.String()
}
