package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
)

// tablePrinter prints rows of fields, the one way every command prints a
// table. A header row comes first (when there is one) unless --no-header;
// on a terminal the columns are aligned, in a pipe each row is its fields
// separated by tabs, so `cut -f` and `awk -F'\t'` can read it. A field
// that holds a control character (a tab or newline in a file name) is
// printed Go-quoted so it cannot break a row.
type tablePrinter struct {
	ios    *IOStreams
	header []string
	rows   [][]string
}

// newTablePrinter starts a table; with no header names, even a terminal
// gets none (a key/value list).
func newTablePrinter(ios *IOStreams, header ...string) *tablePrinter {
	return &tablePrinter{ios: ios, header: header}
}

// AddRow adds one row. Non-string fields are formatted with %v.
func (t *tablePrinter) AddRow(fields ...any) {
	row := make([]string, len(fields))
	for i, f := range fields {
		s := fmt.Sprint(f)
		if strings.ContainsFunc(s, unicode.IsControl) {
			s = strconv.Quote(s)
		}
		row[i] = s
	}
	t.rows = append(t.rows, row)
}

// Render writes the table to stdout.
func (t *tablePrinter) Render() error {
	header := len(t.header) > 0 && !t.ios.noHeader
	if !t.ios.IsStdoutTTY() {
		var b strings.Builder
		if header {
			b.WriteString(strings.Join(t.header, "\t"))
			b.WriteByte('\n')
		}
		for _, row := range t.rows {
			b.WriteString(strings.Join(row, "\t"))
			b.WriteByte('\n')
		}
		_, err := t.ios.Out.Write([]byte(b.String()))
		return err
	}
	const minWidth, tabWidth, padding = 0, 8, 2
	tw := tabwriter.NewWriter(t.ios.Out, minWidth, tabWidth, padding, ' ', 0)
	if header {
		fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	}
	for _, row := range t.rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// Cells of the documents' values: an absent one (null in JSON) is "-".

// processCells are the PID and LIVENESS cells of process p.
func processCells(p *processJSON) (pid, liveness string) {
	if p == nil {
		return "-", "-"
	}
	return strconv.FormatUint(uint64(p.PID), 10), p.Liveness
}

// pidCell is a process as one cell: its pid, marked with its liveness if
// it is not alive; "-" if none.
func pidCell(p *processJSON) string {
	switch {
	case p == nil:
		return "-"
	case p.Liveness == livenessAlive:
		return fmt.Sprint(p.PID)
	}
	return fmt.Sprintf("%d (%s)", p.PID, p.Liveness)
}

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// deref is *s, or "" (an unclaimed entry's name in a table).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// yesNo is a bool as a table shows it.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
